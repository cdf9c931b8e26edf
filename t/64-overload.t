#!/usr/bin/perl
# Overload: beyond the engine's --max-waiting a request is answered 429,
# beyond --max-queue-time of waiting 503, and when a worker's submission
# ring is full 503 — each OpenAI-shaped with Retry-After, streams
# included (their 200 goes out with the first event), and none of it
# costs another request its answer or leaks a KV block.  The engine is
# made slow by stopping it (SIGSTOP) while requests arrive, so what
# piles up is decided by the test, not by a race.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;

sub engine_signal {
    my ($t, $sig) = @_;
    kill $sig, $t->{pids}{engine} or die "kill $sig: $!\n";
}

# nginx and the engine up, and the worker attached: an engine stopped
# before it answers the attach would leave the worker detached
sub start_attached {
    my ($t) = @_;
    $t->start;
    my $st = $t->wait_status(sub { $_[0]{engine} eq 'attached' }, 30);
    ($st->{json}{engine} // '') eq 'attached'
        or die "the worker did not attach in 30 s\n";
    return $t;
}

sub refused_ok {
    my ($r, $status, $code, $what, $name) = @_;
    is($r->{status}, $status, "$name: $status");
    like($r->{headers}{'retry-after'} // '', qr/^\d+$/,
         "$name: Retry-After");
    is($r->{headers}{'content-type'}, 'application/json',
       "$name: a JSON error, not an event stream");
    is($r->{json}{error}{code}, $code, "$name: code $code");
    like($r->{json}{error}{message} // '', $what, "$name: says why");
}

sub served_ok {
    my ($r, $stream, $name) = @_;
    is($r->{status}, 200, "$name: 200");
    if ($stream) {
        like($r->{body}, qr/data: \[DONE\]\n\n\z/, "$name: stream ends");
    } else {
        is(scalar @{ $r->{json}{choices} // [] }, 1, "$name: one choice");
    }
}

sub idle_ok {
    my ($t, $name) = @_;
    my $st = $t->wait_status(sub {
        $_[0]{requests}{running} == 0 && $_[0]{requests}{waiting} == 0
            && $_[0]{kv_blocks}{used} == 0
    }, 30);
    is($st->{json}{kv_blocks}{used}, 0, "$name: no KV block held after");
}

# --max-waiting 3 with one sequence per iteration: A runs, and six
# requests arrive while the engine is stopped; three queue behind A and
# three are refused, whenever nginx submits them, since A holds the only
# seat for its 1,900 tokens.
{
    my $t = PagedLLM::Test->new(engine_args => ['--max-waiting', '3',
                                                '--max-num-seqs', '1']);
    start_attached($t);

    my $a = $t->stream_start('/v1/completions', $J->encode({
        prompt => 'seat holder', max_tokens => 1900,
        ignore_eos => JSON::PP::true, stream => JSON::PP::true }));
    PagedLLM::Test::read_chunks([$a], time + 30, 1);
    engine_signal($t, 'STOP');

    my @req;
    for my $i (0 .. 5) {
        my $stream = $i % 2;
        my $body = $J->encode({ prompt => "queue $i", max_tokens => 4,
                                ignore_eos => JSON::PP::true,
                                stream => $stream ? JSON::PP::true
                                                  : JSON::PP::false });
        push @req, { stream => $stream,
                     sock => $t->send_request(POST => '/v1/completions',
                                              $body) };
    }
    sleep 0.5;      # nginx reads and submits them
    engine_signal($t, 'CONT');

    my $ra = PagedLLM::Test::read_chunks([$a], time + 120)->[0];
    ok($ra->{complete} && !$ra->{error}, 'the seat holder\'s stream ends');

    my (@ok, @refused);
    for my $q (@req) {
        my $r = PagedLLM::Test::read_response($q->{sock}, time + 60);
        $r->{stream} = $q->{stream};
        push @{ $r->{status} == 429 ? \@refused : \@ok }, $r;
    }
    is(scalar @ok, 3, 'max-waiting 3: three admitted');
    is(scalar @refused, 3, 'max-waiting 3: three refused');
    served_ok($_, $_->{stream}, 'admitted ' . ($_->{stream} ? 'stream'
                                                            : 'request'))
        for @ok;
    refused_ok($_, 429, 'too_many_requests', qr/--max-waiting/,
               'refused ' . ($_->{stream} ? 'stream' : 'request'))
        for @refused;
    is($refused[0]{json}{error}{type}, 'invalid_request_error',
       '429: OpenAI error type');
    idle_ok($t, 'max-waiting');
    $t->finish;
}

# --max-queue-time 1 with one sequence per iteration: A runs, B and C
# wait behind it; the engine stops for 1.5 s; B and C are refused, A
# goes on to its end.
{
    my $t = PagedLLM::Test->new(engine_args => ['--max-num-seqs', '1',
                                                '--max-queue-time', '1']);
    start_attached($t);

    my $a = $t->stream_start('/v1/completions', $J->encode({
        prompt => 'first', max_tokens => 1900, ignore_eos => JSON::PP::true,
        stream => JSON::PP::true }));
    PagedLLM::Test::read_chunks([$a], time + 30, 1);
    engine_signal($t, 'STOP');

    my $b = $t->send_request(POST => '/v1/completions', $J->encode({
        prompt => 'second', max_tokens => 4 }));
    my $c = $t->send_request(POST => '/v1/completions', $J->encode({
        prompt => 'third', max_tokens => 4, stream => JSON::PP::true }));
    sleep 0.5;      # nginx submits B and C into the stopped engine's ring

    engine_signal($t, 'CONT');
    my $st = $t->wait_status(sub { $_[0]{requests}{waiting} == 2 }, 10);
    engine_signal($t, 'STOP');
    is($st->{json}{requests}{waiting}, 2, 'B and C wait behind A');
    sleep 1.5;
    engine_signal($t, 'CONT');

    refused_ok(PagedLLM::Test::read_response($b, time + 30), 503,
               'engine_unavailable', qr/waited \d+ ms .*--max-queue-time 1 s/,
               'waited too long');
    refused_ok(PagedLLM::Test::read_response($c, time + 30), 503,
               'engine_unavailable', qr/--max-queue-time/,
               'stream waited too long');

    my $ra = PagedLLM::Test::read_chunks([$a], time + 60)->[0];
    ok($ra->{complete} && !$ra->{error}, 'A: its stream ends cleanly');
    my @ev = grep { /^data: \{/ }
             map { split /(?<=\n\n)/, $_->{data} } @{ $ra->{chunks} };
    my ($last) = grep { /finish_reason":"length"/ } @ev;
    ok($last, 'A: ran to max_tokens');
    idle_ok($t, 'max-queue-time');
    $t->finish;
}

# A full submission ring: 700 prompts of 2000 token ids (8 KB each in the
# ring) arrive while the engine is stopped; the 4 MiB ring takes about 500,
# the rest are answered 503 at once, and every one that went in is served
# once the engine runs again (no --max-queue-time cuts the last of them
# first: the sanitized engine, make test-sanitize, takes longer than the
# default minute to prefill the 500).
{
    my $n = 700;
    my $t = PagedLLM::Test->new(worker_connections => $n + 64,
                                engine_args => ['--max-queue-time', '86400']);
    start_attached($t);

    engine_signal($t, 'STOP');
    my $body = $J->encode({ prompt => [(7) x 2000], max_tokens => 2 });
    my @socks = map { $t->send_request(POST => '/v1/completions', $body) }
                1 .. $n;
    # nginx reads and submits (or refuses) all of them
    sleep PagedLLM::Test::scaled(2);

    my @early = grep { IO::Select->new($_)->can_read(0) } @socks;
    engine_signal($t, 'CONT');

    my %by;
    my $busy_ok = 1;
    for my $s (@socks) {
        my $r = PagedLLM::Test::read_response($s, time + 120);
        $by{$r->{status}}++;
        if ($r->{status} == 503) {
            $busy_ok &&= ($r->{headers}{'retry-after'} // '') =~ /^\d+$/
                && ($r->{json}{error}{message} // '') =~ /busy/
                && ($r->{json}{error}{code} // '') eq 'engine_unavailable';
        } elsif ($r->{status} == 200) {
            $by{choices}++ if @{ $r->{json}{choices} // [] } == 1;
        }
    }
    ok(($by{503} // 0) > 0, "full ring: some refused (@{[ $by{503} // 0 ]})");
    ok($busy_ok, 'full ring: each refusal a 503 "busy" with Retry-After');
    is(scalar @early, $by{503} // 0,
       'full ring: the refused were answered while the engine was stopped');
    is(($by{200} // 0) + ($by{503} // 0), $n,
       'full ring: every request answered 200 or 503');
    is($by{choices} // 0, $by{200} // 0,
       'full ring: every admitted request served whole');
    idle_ok($t, 'full ring');
    $t->finish;
}

done_testing;
