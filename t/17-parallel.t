#!/usr/bin/perl
# Parallel sampling through nginx: n choices on completions and chat
# completions (greedy ones identical, seeded ones different yet
# repeatable, each with its own stop strings and finish_reason, streamed
# with their index), best_of picking the candidate with the highest
# cumulative logprob, the prompt's KV blocks held once for all choices,
# and a client that leaves an n=4 stream freeing every block.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use List::Util qw(sum);
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $t = PagedLLM::Test->new->start;

sub texts { [ map { $_->{text} } @{ $_[0]{json}{choices} } ] }

# greedy: every choice the same
my $r = $t->completion(prompt => 'Twice the same', n => 2, max_tokens => 12,
                       temperature => 0, ignore_eos => $T);
is($r->{status}, 200, 'greedy n=2: 200');
my $c = $r->{json}{choices};
is_deeply([ map { $_->{index} } @$c ], [ 0, 1 ], 'choices indexed 0 and 1');
is($c->[0]{text}, $c->[1]{text}, 'greedy n=2: two identical texts');
is($r->{json}{usage}{completion_tokens}, 24,
   'usage counts both choices\' tokens');

# seeded: different choices, the same again with the same seed
my %seeded = (prompt => 'Three ways', n => 3, max_tokens => 16,
              temperature => 1, seed => 1234, ignore_eos => $T);
my $one_run = texts($t->completion(%seeded));
my $two_run = texts($t->completion(%seeded));
is(scalar @$one_run, 3, 'seeded n=3: three choices');
ok($one_run->[0] ne $one_run->[1] && $one_run->[1] ne $one_run->[2]
   && $one_run->[0] ne $one_run->[2],
   'seeded n=3: the choices differ') or diag($J->encode($one_run));
is_deeply($two_run, $one_run, 'the same seed gives the same three choices again');

# streamed: each chunk names its choice; per choice the same text
my $s = $t->stream_start('/v1/completions',
                         $J->encode({ %seeded, stream => $T }));
my $res = PagedLLM::Test::read_chunks([$s], time + 30)->[0];
my ($ev) = PagedLLM::Test::sse_events($res->{chunks});
my (@text, @finish);
for my $e (grep { $_->{data} ne '[DONE]' } @$ev) {
    my $ch = $J->decode($e->{data})->{choices}[0];
    $text[$ch->{index}] .= $ch->{text};
    push @{ $finish[$ch->{index}] }, $ch->{finish_reason}
        if defined $ch->{finish_reason};
}
is_deeply(\@text, $one_run, 'streamed n=3: each index streams its choice\'s text');
is_deeply(\@finish, [ ['length'], ['length'], ['length'] ],
          'each choice ends once, with its own finish_reason');

# stop strings: each choice is cut at its own first match
my %free = (prompt => 'Stop where you like', n => 4, max_tokens => 24,
            temperature => 1, seed => 77, ignore_eos => $T);
my $full = texts($t->completion(%free));
my $cut = $t->completion(%free, stop => [ 'e', 'o' ]);
my ($good, %reasons) = (1);
for my $i (0 .. 3) {
    my $f = $full->[$i];
    my $p = $f =~ /[eo]/ ? $-[0] : undef;
    my $ch = $cut->{json}{choices}[$i];
    my ($want, $why) = defined $p ? (substr($f, 0, $p), 'stop')
                                  : ($f, 'length');
    $good &&= $ch->{text} eq $want && $ch->{finish_reason} eq $why;
    $reasons{$ch->{finish_reason}}++;
    diag("choice $i: " . $J->encode($ch->{text}) . " ($ch->{finish_reason})");
}
ok($good, 'stop strings cut each choice at its own first match, with its '
   . 'own finish_reason');
ok($reasons{stop}, 'some choices stopped at a stop string');

# best_of: the candidate with the highest cumulative logprob
my %cand = (prompt => 'Pick the best', max_tokens => 10, temperature => 1.2,
            seed => 4321, ignore_eos => $T);
my $all = $t->completion(%cand, n => 4, logprobs => 0);
my @sum = map { sum(@{ $_->{logprobs}{token_logprobs} }) }
          @{ $all->{json}{choices} };
my ($best) = sort { $sum[$b] <=> $sum[$a] || $a <=> $b } 0 .. 3;
diag('cumulative logprobs: ' . join(' ', map { sprintf '%.3f', $_ } @sum));
my $one = $t->completion(%cand, n => 1, best_of => 4);
is(scalar @{ $one->{json}{choices} }, 1, 'best_of=4, n=1: one choice');
is($one->{json}{choices}[0]{text}, $all->{json}{choices}[$best]{text},
   "and it is candidate $best, the highest cumulative logprob");

# chat: n choices with a message each
$r = $t->request(POST => '/v1/chat/completions', $J->encode({
    messages => [ { role => 'user', content => 'Hello twice' } ],
    n => 2, max_tokens => 6, temperature => 0 }));
is($r->{status}, 200, 'chat n=2: 200');
$c = $r->{json}{choices};
ok(@$c == 2 && $c->[1]{index} == 1
   && $c->[0]{message}{content} eq $c->[1]{message}{content},
   'chat n=2: two greedy messages, indexed') or diag($r->{body});

# the prompt's blocks are held once by four choices; leaving frees all
my $prompt = join ' ', map { "word$_" } 1 .. 120;
my $np = $t->completion(prompt => $prompt, max_tokens => 1)
         ->{json}{usage}{prompt_tokens};
my $bs = $t->status->{json}{kv_blocks}{block_size};
$s = $t->stream_start('/v1/completions', $J->encode({
    prompt => $prompt, n => 4, max_tokens => 1000, ignore_eos => $T,
    stream => $T }));
PagedLLM::Test::read_chunks([$s], time + 30, 8);
my $busy = $t->wait_status(sub { $_[0]{requests}{running} == 4 }, 5)->{json};
my $held = $busy->{kv_blocks}{used};
ok($busy->{requests}{running} == 4 && $held >= int($np / $bs)
   && $held < 2 * int($np / $bs),
   "n=4 over a $np-token prompt runs 4 sequences on $held blocks, not 4 "
   . 'copies of the prompt') or diag($J->encode($busy));
close $s->{sock};
my $st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{kv_blocks}{used} == 0 }, 5);
is($st->{json}{kv_blocks}{used}, 0, 'the client left: every block is free');

$t->finish;
done_testing;
