#!/usr/bin/perl
# Many clients that send a streaming request and never read: each one's
# unsent output, in nginx's buffers and in the kernel's send queue of its
# connection, is bounded by pagedllm_max_unsent, so every one of them is
# aborted there and its KV blocks freed, while a client that reads gets
# its whole stream, and no slow client is sent more than the bound (what
# the kernel held when the server closed it) and one flush.  Run with a
# small bound and with the default (1m), whose streams (about 1.6 MiB
# each) fit in nginx's bound plus the kernel's 4 MiB send buffer and so
# are only aborted when the kernel's part counts.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Socket qw(PF_INET SOCK_STREAM SOL_SOCKET SO_RCVBUF inet_aton
              sockaddr_in);
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $N = 200;

# The slow streams' tokens take the machine's time: under a minute on an
# idle 2-core machine, nearly three at a load of 15.  The waits below end
# when what they wait for holds, or when nothing has moved for $STALL
# seconds, never at a fixed time.
my $STALL = PagedLLM::Test::scaled(30);

sub slow_client {
    my ($t, $body) = @_;
    socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096) or die "SO_RCVBUF: $!\n";
    connect($s, sockaddr_in($t->port, inet_aton('127.0.0.1')))
        or die "connect: $!\n";
    binmode $s;
    PagedLLM::Test::syswrite_all($s,
        $t->raw_request(POST => '/v1/completions', $body));
    return $s;
}

# Reads a stream to its end while its chunks keep coming.
sub read_stream {
    my ($s) = @_;
    my @chunks;
    while (1) {
        my $c = PagedLLM::Test::read_chunks([$s], time + $STALL)->[0];
        push @chunks, @{ $c->{chunks} };
        next if ($c->{error} // '') eq 'timeout' && @{ $c->{chunks} };
        return { %$c, chunks => \@chunks };
    }
}

# Polls the status until $cond holds of it, while the engine's count of
# generated tokens keeps growing.
sub wait_progress {
    my ($t, $cond) = @_;
    my ($tokens, $moved) = (-1, time);
    while (1) {
        my $r = $t->status;
        my $j = $r->{json};
        return $r if $j && $cond->($j);
        if ($j && $j->{generation_tokens_total} != $tokens) {
            ($tokens, $moved) = ($j->{generation_tokens_total}, time);
        }
        return $r if time - $moved > $STALL;
        sleep 0.2;
    }
}

# What a slow client finally reads: the bytes of its stream's body, and
# whether the server closed the connection before the last chunk.
sub drain {
    my ($s, $deadline) = @_;
    my $buf = '';
    my $head = PagedLLM::Test::read_head($s, \$buf, $deadline);
    my $c = PagedLLM::Test::read_chunks([{ sock => $s, buf => $buf }],
                                        $deadline)->[0];
    my $bytes = 0;
    $bytes += length $_->{data} for @{ $c->{chunks} };
    return { bytes => $bytes,
             closed => $head && $head->{status} == 200 && !$c->{complete}
                       && ($c->{error} // '') eq
                          'connection closed before the last chunk' };
}

sub slow_readers {
    my ($name, $http, $bound, $steps) = @_;

    # the slow streams queue behind each other as long as the machine
    # takes to fill their bounds: no --max-queue-time cuts them first
    # the reading stream's location holds its whole output, so it ends
    # however late the test process gets to read it
    my $t = PagedLLM::Test->new(http => $http, server => '
        location /roomy/ {
            pagedllm;
            pagedllm_max_unsent 1m;
        }
', engine_args => ['--max-queue-time', '86400'])->start;
    my $t0 = time;

    my $body = $J->encode({ prompt => 'slow', max_tokens => $steps, n => 2,
                            logprobs => 20, ignore_eos => JSON::PP::true,
                            stream => JSON::PP::true });
    my $fast = $t->stream_start('/roomy/v1/completions',
        $J->encode({ prompt => 'fast reader', max_tokens => 400,
                     ignore_eos => JSON::PP::true,
                     stream => JSON::PP::true }));
    my @slow = map { slow_client($t, $body) } 1 .. $N;

    my $c = read_stream($fast);
    ok($c->{complete} && !$c->{error}, "$name: the reading stream ends");
    my ($ev) = PagedLLM::Test::sse_events($c->{chunks});
    is(scalar(grep { $_->{data} ne '[DONE]' } @$ev), 400,
       "$name: the reading stream has all its 400 tokens");

    my $st = wait_progress($t, sub {
        $_[0]{requests}{running} == 0 && $_[0]{requests}{waiting} == 0
        && $_[0]{kv_blocks}{used} == 0 });
    my $j = $st->{json};
    is($j->{requests}{running} + $j->{requests}{waiting}, 0,
       "$name: no slow stream runs or waits");
    is($j->{kv_blocks}{used}, 0, "$name: their KV blocks were freed");
    ok($j->{generation_tokens_total} < $N * 2 * $steps,
       "$name: the slow streams stopped before their ends");

    my @why = $t->error_log =~ /client reads too slowly/g;
    is(scalar @why, $N, "$name: the error log says why for each of $N");

    my $deadline = time + 2 * $STALL;
    my @got = map { drain($_, $deadline) } @slow;
    is(scalar(grep { $_->{closed} } @got), $N,
       "$name: the server closed all $N connections mid-stream");
    my ($most) = sort { $b <=> $a } map { $_->{bytes} } @got;
    cmp_ok($most, '<=', $bound + 65536,
           "$name: no slow client got more than the bound and a flush");
    close $_ for @slow;

    diag(sprintf "%s: %d slow readers aborted in %.1f s, the most one got "
                 . "%d bytes", $name, $N, time - $t0, $most);

    is($t->completion(prompt => 'after', max_tokens => 2)->{status}, 200,
       "$name: the worker still serves");
    $t->finish;
}

# 1200 steps of 2 choices with 20 top logprobs each: about 1.6 MiB.  make
# test-sanitize (PAGEDLLM_TEST_SANITIZED) runs the 64k bound alone: the
# default's 200 streams of about 1.6 MiB take its sanitized engine over
# 10 minutes on 2 cores (docs/RELIABILITY.md); make test runs both
slow_readers('max_unsent 64k', "    pagedllm_max_unsent 64k;\n", 65536, 1200);
slow_readers('default config', '', 1048576, 1200)
    unless $ENV{PAGEDLLM_TEST_SANITIZED};

done_testing;
