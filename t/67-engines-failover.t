#!/usr/bin/perl
# Failover among three CPU engines behind one nginx: kill -9 one under
# load.  Its streams end with an error event before [DONE], the worker
# detaches from it within a second, no request submitted after the detach
# fails (the others take them), /metrics says which engine is down; the
# engine restarts and takes work again with no reload.  All engines down:
# 503 with Retry-After and an OpenAI error body; back again: served.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use List::Util qw(max min sum);
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Engines;
use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Engines::start(3);
my $nginx_pid = $t->{pids}{nginx};

sub requests { PagedLLM::Engines::counter($t, 'pagedllm_requests_total') }

# long streams (about 3 s each on the tiny model), spread by least_load:
# three on each engine
my @before = requests();
my $long = $J->encode({ prompt => 'long', max_tokens => 2000,
                        ignore_eos => JSON::PP::true,
                        stream => JSON::PP::true });
my @streams = map { $t->stream_start('/v1/completions', $long) } 1 .. 9;
is_deeply([ map { $_->{status} } @streams ], [ (200) x 9 ],
          'nine long streams start');
my $first = PagedLLM::Test::read_chunks(\@streams, time + 30, 2);
ok(!(grep { @{ $_->{chunks} } < 2 } @$first), 'tokens arrive on every stream');
is_deeply([ PagedLLM::Engines::delta([ requests() ], \@before) ], [ 3, 3, 3 ],
          'three streams on each engine');

# a client sending short requests one after another through the kill,
# logging when each started and how it ended
my $log = $t->dir . '/client.log';
my $client = fork // die "fork: $!\n";
if ($client == 0) {
    open my $fh, '>', $log or exit 1;
    $fh->autoflush(1);
    my $end = time + 3;
    while (time < $end) {
        my $start = time;
        my $r = $t->request(POST => '/v1/completions',
                            '{"prompt":"meanwhile","max_tokens":4}');
        printf $fh "%.6f %d\n", $start, $r->{status};
    }
    exit 0;
}

sleep 0.3;

my $killed = time;
$t->stop_engine_n(1, 'KILL');

my $detached;
my $deadline = time + 5;
while (time < $deadline) {
    my $st = $t->status->{json};
    if (($st->{engines}[1]{engine} // '') eq 'detached') {
        $detached = time;
        last;
    }
    sleep 0.01;
}
ok($detached && $detached - $killed < 1,
   sprintf('engine 1 killed: detached within a second (%.3f s)',
           ($detached // time) - $killed));

waitpid($client, 0);
open my $fh, '<', $log or die "$log: $!\n";
my @lines = map { [ split ] } <$fh>;
close $fh;
my @after = grep { $_->[0] >= $detached } @lines;
ok(@after >= 3, scalar(@after) . ' requests submitted after the detach');
is_deeply([ grep { $_->[1] != 200 } @after ], [],
          'no request submitted after the detach failed');

# the streams: those on engine 1 end with an error event, the others run
# to their end
my $rest = PagedLLM::Test::read_chunks(\@streams, time + 60);
my ($errors, $complete) = (0, 0);
for my $c (@$rest) {
    my ($ev) = PagedLLM::Test::sse_events($c->{chunks});
    next unless $c->{complete} && @$ev && $ev->[-1]{data} eq '[DONE]';
    my $last = eval { $J->decode($ev->[-2]{data}) } // {};
    if ($last->{error}) {
        $errors++;
    } elsif (($last->{choices}[0]{finish_reason} // '') eq 'length') {
        $complete++;
    }
}
is($errors, 3, "the killed engine's three streams end with an error event");
is($complete, 6, "the other engines' six streams run to their end");

my $v = PagedLLM::Engines::scrape($t);
is(PagedLLM::Engines::sample($t, $v, 'pagedllm_engine_attached', 1), 0,
   'metrics: engine 1 attached 0');
is(PagedLLM::Engines::sample($t, $v, 'pagedllm_engine_attached', 0), 1,
   'metrics: engine 0 attached 1');
ok(!defined PagedLLM::Engines::sample($t, $v, 'pagedllm_requests_running', 1),
   "metrics: no series of the detached engine's stats");
is($t->request(GET => '/health')->{status}, 200,
   'health: 200 while two engines serve');

# restarted: re-attached without a reload, and takes work again
PagedLLM::Engines::start_engine($t, 1);
ok(PagedLLM::Engines::wait_attached($t, [0, 1, 2]),
   'engine 1 restarted: attached again');
is($t->{pids}{nginx}, $nginx_pid, 'the same nginx, no reload');
@before = requests();
@streams = map { $t->send_request(POST => '/v1/completions', $long) } 1 .. 6;
$deadline = time + 20;
my @d;
do {
    sleep 0.05;
    @d = PagedLLM::Engines::delta([ requests() ], \@before);
} while (sum(@d) < 6 && time < $deadline);
close $_ for @streams;
is_deeply(\@d, [ 2, 2, 2 ], 'engine 1 back: a burst spreads over all three');

# all down: 503 with Retry-After, OpenAI-shaped
$t->stop_engine_n($_, 'KILL') for 0 .. 2;
PagedLLM::Engines::wait_attached($t, [], [0, 1, 2]);
my $r = $t->completion(prompt => 'anyone?', max_tokens => 2);
is($r->{status}, 503, 'all engines down: 503');
like($r->{headers}{'retry-after'} // '', qr/^\d+$/, 'all down: Retry-After');
is($r->{json}{error}{type}, 'server_error', 'all down: an OpenAI error body');
is($r->{json}{error}{code}, 'engine_unavailable',
   'all down: code engine_unavailable');
is($t->request(GET => '/v1/models')->{status}, 503, 'all down: models 503');
is($t->request(GET => '/health')->{status}, 503, 'all down: health 503');
my $st = $t->status;
is($st->{status}, 503, 'all down: status 503');
is_deeply([ map { $_->{engine} } @{ $st->{json}{engines} // [] } ],
          [ ('detached') x 3 ], 'all down: status shows three detached');

PagedLLM::Engines::start_engine($t, 2);
PagedLLM::Engines::wait_attached($t, [2]);
is($t->completion(prompt => 'back', max_tokens => 2)->{status}, 200,
   'one engine back: served');

$t->finish;
done_testing;
