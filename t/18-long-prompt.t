#!/usr/bin/perl
# Tokenizing a long prompt never stalls the worker's event loop: while one
# client streams a long generation, another posts a ~1 MB prompt to the
# same (only) worker; the body is decoded and the prompt tokenized on the
# thread pool, so the stream's events keep coming.  The prompt is 1 MB of letters without a
# space: one pre-token for the byte-level BPE of the tiny model, which
# takes the worker's tokenizer several hundred milliseconds.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use POSIX qw(_exit);
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

# The bound on the stream's largest gap between two events while the long
# prompt is in the worker.  Tokenizing it in the event loop stalls the
# stream for the whole tokenization: 180-580 ms measured on the 2-core
# test machine, idle to loaded.  On the thread pool (decoding the body's JSON
# there too) what stays in the loop is reading the 1 MB body and checking
# the fields, and the thread competes with the loop for the two cores:
# 16-32 ms measured with a compiler running beside.  100 ms is three times
# that and under half the shortest stall.
my $BOUND = 0.100;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new(http => '
    client_max_body_size 4m;
    client_body_buffer_size 4m;
')->start;

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};

srand(21);
my $letters = join '', map { ('a' .. 'z')[int rand 26] } 1 .. 1_000_000;
my $body = $J->encode({ prompt => $letters, max_tokens => 1 });

my $stream = $t->stream_start('/v1/completions',
    $J->encode({ prompt => 'a long story', max_tokens => $ctx - 16,
                 ignore_eos => JSON::PP::true, stream => JSON::PP::true }));
is($stream->{status}, 200, 'the long stream starts');

# a few events first, so that the stream runs before the prompt comes
my $head = PagedLLM::Test::read_chunks([$stream], time + 30, 5)->[0];

pipe(my $rd, my $wr) or die "pipe: $!\n";
my $pid = fork // die "fork: $!\n";

if ($pid == 0) {
    close $rd;
    my $t0 = time;
    my $r = $t->request(POST => '/v1/completions', $body);
    my $t1 = time;
    print $wr $J->encode({ t0 => $t0, t1 => $t1, status => $r->{status},
                           message => $r->{json}{error}{message} // '' });
    close $wr;
    _exit(0);
}

close $wr;

my $rest = PagedLLM::Test::read_chunks([$stream], time + 60)->[0];
my $big = $J->decode(do { local $/; <$rd> } || '{}');
waitpid $pid, 0;

ok($rest->{complete} && !$rest->{error}, 'the long stream runs to its end');

is($big->{status}, 400, 'the long prompt is answered');
like($big->{message} // '',
     qr/maximum context length is \d+ tokens, however your prompt has \d{5,}/,
     'after it was tokenized whole (its tokens counted)');

# the largest gap between consecutive events that overlaps the time the
# long prompt was in the worker, from when it was sent until its answer
# came (the client reads the stream all along: its body was made before)
my @times = map { $_->{time} } @{ $rest->{chunks} };
my ($gap, $n) = (0, 0);
for my $i (1 .. $#times) {
    next if $times[$i] < $big->{t0} || $times[$i - 1] > $big->{t1};
    $n++;
    $gap = $times[$i] - $times[$i - 1] if $times[$i] - $times[$i - 1] > $gap;
}

ok($times[-1] > $big->{t1}, 'the stream was still running when the long '
                            . 'prompt was answered');
ok($n >= 1, "the stream was measured while the long prompt was in the "
            . "worker ($n gaps)");
cmp_ok($gap, '<', $BOUND, sprintf('the stream\'s largest gap meanwhile, '
                                  . '%.1f ms, stays under %.0f ms',
                                  $gap * 1000, $BOUND * 1000));
diag(sprintf('long prompt answered in %.1f ms; largest gap %.1f ms',
             ($big->{t1} - $big->{t0}) * 1000, $gap * 1000));

# a client that goes away while its prompt is on the thread pool: the
# request ends when the task does, and the worker goes on serving
for (1 .. 3) {
    my $s = $t->send_request(POST => '/v1/completions', $body);
    sleep 0.05;
    close $s;
}
sleep 1;
is($t->completion(prompt => 'after', max_tokens => 2)->{status}, 200,
   'the worker serves after clients left during tokenizing');

$t->finish;
done_testing;
