#!/usr/bin/perl
# Beam search through nginx, as vLLM's OpenAI server takes it: use_beam_search
# with width best_of (n without it), length_penalty and early_stopping, on
# completions and chat; the best n beams come back best first, each with its
# cumulative_logprob; stream: true answers one JSON response; the bad
# combinations are 400s naming the parameter; a client that leaves frees
# every block.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $F = JSON::PP::false;
my $t = PagedLLM::Test->new->start;

my %beam = (prompt => 'Search wide', use_beam_search => $T, n => 2,
            best_of => 4, max_tokens => 12, ignore_eos => $T);

my $r = $t->completion(%beam);
is($r->{status}, 200, 'beam search width 4, n 2: 200') or diag($r->{body});
my $c = $r->{json}{choices};
is_deeply([ map { $_->{index} } @$c ], [ 0, 1 ], 'two choices, 0 and 1');
ok(defined $c->[0]{cumulative_logprob} && defined $c->[1]{cumulative_logprob}
   && $c->[0]{cumulative_logprob} < 0
   && $c->[0]{cumulative_logprob} >= $c->[1]{cumulative_logprob},
   'each with its cumulative_logprob, the best first (12 tokens each, '
   . 'length_penalty 1)') or diag($r->{body});
is($r->{json}{usage}{completion_tokens}, 24, 'usage counts both beams');
is_deeply([ map { $_->{text} } @{ $t->completion(%beam)->{json}{choices} } ],
          [ map { $_->{text} } @$c ], 'the same search gives the same beams');

my $s = $t->request(POST => '/v1/completions',
                    $J->encode({ %beam, stream => $T }));
ok($s->{status} == 200 && $s->{json}
   && $s->{json}{object} eq 'text_completion',
   'stream: true answers one JSON response, as vLLM does')
    or diag($s->{body});
is_deeply([ map { $_->{text} } @{ $s->{json}{choices} } ],
          [ map { $_->{text} } @$c ], 'with the same beams');

my $l = $t->completion(%beam, length_penalty => 0.5, early_stopping => 'never');
is($l->{status}, 200, 'length_penalty 0.5, early_stopping "never": 200');
$l = $t->completion(%beam, early_stopping => $T, stop_token_ids => [ 5 ]);
is($l->{status}, 200, 'early_stopping true with stop_token_ids: 200');

$r = $t->request(POST => '/v1/chat/completions', $J->encode({
    messages => [ { role => 'user', content => 'Three beams' } ],
    use_beam_search => $T, n => 3, max_tokens => 8 }));
is($r->{status}, 200, 'chat: width n = 3') or diag($r->{body});
$c = $r->{json}{choices};
ok(@$c == 3 && $c->[2]{index} == 2 && defined $c->[2]{message}{content}
   && defined $c->[2]{cumulative_logprob},
   'chat: three messages with their cumulative_logprob')
    or diag($r->{body});

my @bad = (
    [ 'temperature', { temperature => 0.7 } ],
    [ 'top_p', { top_p => 0.5 } ],
    [ 'top_k', { top_k => 5 } ],
    [ 'n', { n => 1, best_of => undef } ],
    [ 'best_of', { best_of => 17 } ],
    [ 'early_stopping', { early_stopping => 'sometimes' } ],
    [ 'length_penalty', { length_penalty => 11 } ],
);
for my $b (@bad) {
    my ($param, $f) = @$b;
    my %req = (%beam, %$f);
    delete $req{$_} for grep { !defined $req{$_} } keys %req;
    my $e = $t->completion(%req);
    ok($e->{status} == 400 && ($e->{json}{error}{param} // '') eq $param,
       "beam search with " . $J->encode($f) . ": 400 naming $param")
        or diag("$e->{status}: $e->{body}");
}

my $e = $t->completion(%beam, logprobs => 1);
ok($e->{status} == 400 && $e->{json}{error}{message} =~ /logprobs/,
   'beam search with logprobs: 400 naming logprobs') or diag($e->{body});
$e = $t->completion(prompt => 'x', early_stopping => $T);
ok($e->{status} == 400 && ($e->{json}{error}{param} // '') eq 'early_stopping',
   'early_stopping without beam search: 400 naming it') or diag($e->{body});

# a client that leaves before its answer: nothing leaks.  A beam search
# sends nothing, not even its response head, until it is over, so the
# client leaves once the engine runs it (t/unit/engine_beam.c aborts one
# mid-search through the engine's own counters)
my $long = $t->send_request(POST => '/v1/completions', $J->encode({
    %beam, n => 1, best_of => 16, max_tokens => 2000,
    prompt => 'Long search' }));
$t->wait_status(sub { $_[0]{requests}{running} >= 1 }, 10);
close $long;
my $st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{kv_blocks}{used} == 0 }, 10);
is($st->{json}{kv_blocks}{used}, 0, 'a client that leaves a width-16 '
   . 'search: every block is free');

$t->finish;
done_testing;
