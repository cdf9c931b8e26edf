#!/usr/bin/perl
# The parameter table (PL_PARAMS in proto/pl_params.h, read from the
# header) walked on both endpoints under every name a row has there
# (chat's top_logprobs and max_completion_tokens included): each row's
# lowest and highest values accepted, the values just outside refused, a
# value of every wrong JSON type (string, boolean, array, object) refused
# with a 400 naming the field, null taken as left out, and an integral
# number such as 2.0 taken as an integer at both bounds.  t/19-params.t
# walks the completions side's bounds; this adds chat, every JSON type,
# and the integers outside the table (seed, token ids,
# truncate_prompt_tokens).  Then the fields that ask for nothing only with
# one value: any other, of whatever type, is a 400 naming the field.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Params qw(refused accepted);
use PagedLLM::Test;

my ($rows, $def) = PagedLLM::Params::table();
cmp_ok(scalar @$rows, '>=', 10, 'the table has its parameters');

my $t = PagedLLM::Test->new->start;

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
open my $cf, '<', "$t->{model}/config.json" or die "config.json: $!\n";
my $vocab = JSON::PP->new->decode(do { local $/; <$cf> })->{vocab_size};

my %endpoint = (
    completions => { path => '/v1/completions',
                     base => { prompt => '[1,2]' } },
    chat => { path => '/v1/chat/completions',
              base => { messages => '[{"role":"user","content":"x"}]' } },
);

# each body is written by hand, so that 2.0 reaches the server as 2.0
sub post {
    my ($ep, %f) = @_;
    my %body = (%{ $endpoint{$ep}{base} }, max_tokens => 1, %f);
    delete $body{max_tokens} if exists $f{max_completion_tokens};
    my $json = '{' . join(',', map { "\"$_\":$body{$_}" } sort keys %body)
             . '}';
    return $t->request(POST => $endpoint{$ep}{path}, $json);
}

# an integral value written as a JSON real
sub real { my $v = shift; $v =~ /[.e]/ ? $v : "$v.0" }

for my $ep (qw(completions chat)) {
    my $prompt = post($ep)->{json}{usage}{prompt_tokens}
        or BAIL_OUT("no usage from $ep");

    for my $p (@$rows) {
        my @names = ($p->{name});
        my %with;
        if ($ep eq 'chat') {
            @names = ('top_logprobs') if $p->{name} eq 'logprobs';
            push @names, 'max_completion_tokens'
                if $p->{name} eq 'max_tokens';
            %with = (logprobs => 'true') if $p->{name} eq 'logprobs';
            if ($p->{name} eq 'best_of') {
                refused(post($ep, best_of => 1), 'best_of',
                        "$ep: best_of is completions' only");
                next;
            }
        }

        my ($lo, $hi, $under, $over) =
            PagedLLM::Params::bounds($p, $ctx, $vocab, $prompt);

        for my $name (@names) {
            my $what = "$ep: $name";
            # min_tokens may not pass max_tokens
            my %hi_with = $name eq 'min_tokens' ? (max_tokens => $hi) : ();

            for my $bad ('"1"', 'true', 'false', "[$lo]", "{\"v\":$lo}") {
                refused(post($ep, %with, $name => $bad), $name,
                        "$what = $bad, a wrong type");
            }
            accepted(post($ep, %with, $name => 'null'), "$what = null");
            accepted(post($ep, %with, $name => $lo), "$what = $lo");
            accepted(post($ep, %with, %hi_with, $name => $hi),
                     "$what = $hi");
            refused(post($ep, %with, $name => $under), $name,
                    "$what = $under, below its range");
            refused(post($ep, %with, %hi_with, $name => $over), $name,
                    "$what = $over, above its range");

            next unless $p->{int};
            accepted(post($ep, %with, $name => real($lo)),
                     "$what = " . real($lo) . ', an integer');
            accepted(post($ep, %with, %hi_with, $name => real($hi)),
                     "$what = " . real($hi) . ', an integer');
            refused(post($ep, %with, $name => $lo + 0.5), $name,
                    "$what = " . ($lo + 0.5) . ', not integral');
        }
    }

    # logit_bias values: the table's bounds, each token's value a number
    my ($blo, $bhi) = ($def->{PL_PARAM_BIAS_LO}, $def->{PL_PARAM_BIAS_HI});
    accepted(post($ep, logit_bias => "{\"5\":$blo}"), "$ep: bias $blo");
    accepted(post($ep, logit_bias => "{\"5\":$bhi}"), "$ep: bias $bhi");
    refused(post($ep, logit_bias => '{"5":' . ($bhi + 1) . '}'),
            'logit_bias', "$ep: bias " . ($bhi + 1));
    refused(post($ep, logit_bias => '{"5":' . ($blo - 1) . '}'),
            'logit_bias', "$ep: bias " . ($blo - 1));
    refused(post($ep, logit_bias => '{"5":"1"}'), 'logit_bias',
            "$ep: bias value a string");

    # integers outside the table: integral reals are integers there too
    accepted(post($ep, seed => '7.0'), "$ep: seed 7.0");
    refused(post($ep, seed => '7.5'), 'seed', "$ep: seed 7.5");
    refused(post($ep, seed => '"7"'), 'seed', "$ep: seed a string");
    accepted(post($ep, stop_token_ids => '[5.0]'), "$ep: stop id 5.0");
    refused(post($ep, stop_token_ids => '[5.5]'), 'stop_token_ids',
            "$ep: stop id 5.5");
    refused(post($ep, stop_token_ids => "[$vocab]"), 'stop_token_ids',
            "$ep: stop id $vocab, out of the vocabulary");
    accepted(post($ep, truncate_prompt_tokens => '1.0'),
             "$ep: truncate_prompt_tokens 1.0");
    refused(post($ep, truncate_prompt_tokens => '0'),
            'truncate_prompt_tokens', "$ep: truncate_prompt_tokens 0");
}

accepted(post('completions', prompt => '[1.0,2.0]'), 'prompt ids 1.0, 2.0');
refused(post('completions', prompt => '[1,2.5]'), 'prompt', 'prompt id 2.5');

# the fields whose neutral value asks for nothing: that value and the
# ones they implement are accepted, every other value or type is refused
my %neutral = (
    chat => { tools => '[]', functions => '[]', tool_choice => '"none"',
              function_call => '"none"',
              response_format => '{"type":"text"}' },
    completions => { echo => 'false', suffix => '""' },
);
my %implemented = (
    response_format => { '{"type":"json_object"}' => 1 },
    echo => { 'true' => 1 },
);
for my $ep (sort keys %neutral) {
    for my $f (sort keys %{ $neutral{$ep} }) {
        accepted(post($ep, $f => $neutral{$ep}{$f}),
                 "$ep: $f = $neutral{$ep}{$f}");
        for my $v ('false', 'true', '0', '""', '"x"', '{}', '[]', '[1]',
                   '{"type":"json_object"}')
        {
            next if $v eq $neutral{$ep}{$f};
            if ($implemented{$f}{$v}) {
                accepted(post($ep, $f => $v), "$ep: $f = $v");
            } else {
                refused(post($ep, $f => $v), $f, "$ep: $f = $v");
            }
        }
    }
}

$t->finish;
done_testing;
