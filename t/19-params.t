#!/usr/bin/perl
# Every sampling parameter of the table in pl_params.h, read from the
# header itself: a value of the wrong type is a 400 naming the parameter,
# a value just outside its range is a 400 naming it, and a value at each
# bound is accepted.  A range open at lo refuses lo itself and accepts a
# little more.  A bound that is the model's context accepts the context
# less the prompt (both share it); one that is the vocabulary, its size.
# Then the logit_bias value bounds, and an integral number as an integer.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my ($header) = grep { -e } map { "$_/pl_params.h" } qw(proto);
die "pl_params.h not found\n" unless $header;
(my $dir = $header) =~ s{/[^/]*$}{};

# the #defines the table's values may name
my %def;
for my $f ($header, "$dir/pl_proto.h") {
    open my $fh, '<', $f or die "$f: $!\n";
    while (<$fh>) {
        $def{$1} = $2 if /^#define\s+(PL_\w+)\s+\(?(-?[\d.]+)u?\)?\s*(?:\/\*.*)?$/;
    }
}

open my $fh, '<', $header or die "$header: $!\n";
my $src = do { local $/; <$fh> };
$src =~ s{/\*.*?\*/}{}gs;
$src =~ s{\\\n}{ }g;
my ($table) = $src =~ /#define\s+PL_PARAMS\(X\)(.*)/ or die "no PL_PARAMS\n";

my @rows;
while ($table =~ /X\(([^)]*)\)/g) {
    my ($name, $type, $lo, $hi, $limit, $open_lo) = map { s/^\s+|\s+$//gr }
        split /,/, $1;
    my $num = sub { my $v = shift; exists $def{$v} ? $def{$v} : $v };
    push @rows, { name => $name, int => $type eq 'PL_PARAM_INT',
                  lo => $num->($lo), hi => $num->($hi), limit => $limit,
                  open_lo => $open_lo };
}
cmp_ok(scalar @rows, '>=', 10, 'the table has its parameters');

my $t = PagedLLM::Test->new->start;

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
open my $cf, '<', "$t->{model}/config.json" or die "config.json: $!\n";
my $vocab = JSON::PP->new->decode(do { local $/; <$cf> })->{vocab_size};

my $PROMPT = 2;     # tokens: the prompt is [1, 2]

sub post {
    my (%f) = @_;
    $f{prompt} //= '[1,2]';
    $f{max_tokens} //= 1;
    my $body = '{' . join(',', map { "\"$_\":$f{$_}" } sort keys %f) . '}';
    return $t->request(POST => '/v1/completions', $body);
}

sub refused {
    my ($r, $param, $name) = @_;
    ok($r->{status} == 400 && ($r->{json}{error}{param} // '') eq $param,
       "$name: 400 naming $param")
        or diag("status $r->{status}: $r->{body}");
}

sub accepted {
    my ($r, $name) = @_;
    is($r->{status}, 200, "$name: accepted") or diag($r->{body});
}

for my $p (@rows) {
    my $name = $p->{name};
    my $hi = $p->{limit} eq 'PL_PARAM_CONTEXT' ? $ctx - $PROMPT
           : $p->{limit} eq 'PL_PARAM_VOCAB' ? $vocab : $p->{hi};
    my $over = $p->{limit} eq 'PL_PARAM_CONTEXT' ? $ctx + 1
             : $p->{int} ? $hi + 1 : $hi + 0.01;
    my $under = $p->{open_lo} ? $p->{lo}
              : $p->{int} ? $p->{lo} - 1 : $p->{lo} - 0.01;
    my $lo_ok = $p->{open_lo} ? $p->{lo} + 0.01 : $p->{lo};

    # min_tokens may not pass max_tokens; best_of may not be below n
    my %with = $name eq 'min_tokens' ? (max_tokens => $hi) : ();

    refused(post($name => '"x"'), $name, "$name as a string");
    refused(post($name => 'true'), $name, "$name as a boolean");
    refused(post($name => $p->{lo} + 0.5), $name, "$name not integral")
        if $p->{int};
    refused(post($name => $under), $name, "$name = $under, below its range");
    refused(post($name => $over, %with), $name,
            "$name = $over, above its range");
    accepted(post($name => $lo_ok), "$name = $lo_ok");
    accepted(post($name => $hi, %with), "$name = $hi");
}

my ($blo, $bhi) = ($def{PL_PARAM_BIAS_LO}, $def{PL_PARAM_BIAS_HI});
accepted(post(logit_bias => "{\"5\":$blo}"), "logit_bias value $blo");
accepted(post(logit_bias => "{\"5\":$bhi}"), "logit_bias value $bhi");
refused(post(logit_bias => '{"5":' . ($bhi + 1) . '}'), 'logit_bias',
        'logit_bias value ' . ($bhi + 1));
refused(post(logit_bias => '{"5":' . ($blo - 0.5) . '}'), 'logit_bias',
        'logit_bias value ' . ($blo - 0.5));

my $r = post(max_tokens => '2.0', ignore_eos => 'true');
is($r->{status}, 200, 'max_tokens 2.0 is the integer 2');
is($r->{json}{usage}{completion_tokens}, 2, 'and two tokens come');

$t->finish;
done_testing;
