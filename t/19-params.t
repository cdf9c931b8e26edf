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

use PagedLLM::Params qw(refused accepted);
use PagedLLM::Test;

my ($rows, $def) = PagedLLM::Params::table();
my @rows = @$rows;
my %def = %$def;
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

for my $p (@rows) {
    my $name = $p->{name};
    my ($lo_ok, $hi, $under, $over) =
        PagedLLM::Params::bounds($p, $ctx, $vocab, $PROMPT);

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
