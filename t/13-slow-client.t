#!/usr/bin/perl
# One client that stops reading must not hold up the worker: its unsent
# output grows in its own buffers until pagedllm_max_unsent, then its
# generation is aborted; another stream on the same worker runs to the end.
# The reading stream goes through a location whose limit holds its whole
# output, so it completes however late the test process gets to read it.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new(http => '
    pagedllm_max_unsent 8k;
', listen => 'sndbuf=4k', server => '
        location /roomy/ {
            pagedllm;
            pagedllm_max_unsent 1m;
        }
')->start;

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
my $long = $ctx - 20;

# the slow client: a small receive buffer, and it never reads
my $slow = $t->connect;
setsockopt($slow, SOL_SOCKET, SO_RCVBUF, 4096);
PagedLLM::Test::syswrite_all($slow, $t->raw_request(POST => '/v1/completions',
    $J->encode({ prompt => 'slow reader', max_tokens => $long,
                 ignore_eos => JSON::PP::true, stream => JSON::PP::true })));

my $fast = $t->stream_start('/roomy/v1/completions',
    $J->encode({ prompt => 'fast reader', max_tokens => 400,
                 ignore_eos => JSON::PP::true, stream => JSON::PP::true }));
my $c = PagedLLM::Test::read_chunks([$fast],
    time + PagedLLM::Test::scaled(30))->[0];
ok($c->{complete} && !$c->{error}, 'the reading stream runs to its end');
my ($ev) = PagedLLM::Test::sse_events($c->{chunks});
is($ev->[-1]{data}, '[DONE]', 'the reading stream ends with [DONE]');

my $st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{kv_blocks}{used} == 0 }, 10);
is($st->{json}{requests}{running}, 0, 'the slow stream was aborted');
is($st->{json}{kv_blocks}{used}, 0, 'its KV blocks were freed');
ok($st->{json}{generation_tokens_total} < $long + 400,
   'the slow stream did not generate to its end');
like($t->error_log, qr/client reads too slowly/,
     'the error log says why it was aborted');
close $slow;

is($t->completion(prompt => 'after', max_tokens => 2)->{status}, 200,
   'the worker still serves');

$t->finish;
done_testing;
