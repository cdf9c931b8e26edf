#!/usr/bin/perl
# Two streams at once make progress together: the engine batches them, and
# the worker's doorbell feeds both, so their events interleave.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new->start;

my $max = 300;
my $body = $J->encode({ prompt => 'Two streams', max_tokens => $max,
                        ignore_eos => JSON::PP::true,
                        stream => JSON::PP::true });

my @s = map { $t->stream_start('/v1/completions', $body) } 1 .. 2;
is($_->{status}, 200, 'concurrent stream answers 200') for @s;

my $res = PagedLLM::Test::read_chunks(\@s, time + 60);
for my $i (0, 1) {
    ok($res->[$i]{complete} && !$res->[$i]{error},
       "stream $i: framing correct and complete")
        or diag($res->[$i]{error});

    my ($ev) = PagedLLM::Test::sse_events($res->[$i]{chunks});
    my @tok = map { $J->decode($_->{data}) }
              grep { $_->{data} ne '[DONE]' } @$ev;
    ok(@tok == $max || (@tok == $max + 1 && $tok[-1]{choices}[0]{text} eq ''),
       "stream $i: $max token events") or diag(scalar(@tok) . ' events');
}

my ($x, $y) = map { $_->{chunks} } @$res;
my ($x0, $x1) = ($x->[0]{seq}, $x->[-1]{seq});
my ($y0, $y1) = ($y->[0]{seq}, $y->[-1]{seq});
ok($y0 < $x1 && $x0 < $y1, 'the two streams progress together')
    or diag("stream 0 chunks $x0..$x1, stream 1 chunks $y0..$y1");

my @order = map { $_->[0] } sort { $a->[1] <=> $b->[1] }
            (map { [0, $_->{seq}] } @$x), (map { [1, $_->{seq}] } @$y);
my $switches = grep { $order[$_] != $order[$_ - 1] } 1 .. $#order;
ok($switches >= 4, "their chunks interleave ($switches switches)");

$t->finish;
done_testing;
