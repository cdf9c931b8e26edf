#!/usr/bin/perl
# nginx without its engine answers 503 at once; when the engine appears,
# dies mid-stream, and comes back, the workers follow by themselves, with
# no reload.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new(workers => 2);
$t->start_nginx;

my $t0 = time;
my $r = $t->completion(prompt => 'anyone?', max_tokens => 2);
my $took = time - $t0;
is($r->{status}, 503, 'no engine: 503');
ok($took < 1, sprintf('no engine: answered in %.3f s', $took));
ok($r->{headers}{'retry-after'} =~ /^\d+$/, 'no engine: Retry-After');
is($r->{json}{error}{type}, 'server_error', 'no engine: OpenAI error body');

my $st = $t->status;
is($st->{status}, 503, 'status without engine: 503');
is_deeply($st->{json}, { engine => 'detached' }, 'status says detached');
is($t->request(GET => '/v1/models')->{status}, 503, 'models without engine: 503');

$t->start_engine;

sub wait_serving {
    my $deadline = time + 10;
    my $r;
    do {
        $r = $t->completion(prompt => 'back?', max_tokens => 2);
        return $r if $r->{status} == 200;
        sleep 0.1;
    } while (time < $deadline);
    return $r;
}

is(wait_serving()->{status}, 200, 'engine started later: served without reload');
ok($t->running('nginx'), 'the same nginx is still running');

my $s = $t->stream_start('/v1/completions',
    $J->encode({ prompt => 'long', max_tokens => 1500,
                 ignore_eos => JSON::PP::true, stream => JSON::PP::true }));
is($s->{status}, 200, 'a long stream starts');
my $c = PagedLLM::Test::read_chunks([$s], time + 30, 2)->[0];
ok(@{ $c->{chunks} } >= 2, 'tokens arrive');

$t->stop_engine('KILL');

my $rest = PagedLLM::Test::read_chunks([$s], time + 10)->[0];
ok($rest->{complete} && !$rest->{error}, 'engine killed: the stream ends cleanly')
    or diag($rest->{error});
my ($ev) = PagedLLM::Test::sse_events($rest->{chunks});
is($ev->[-1]{data}, '[DONE]', 'engine killed: the stream ends with [DONE]');
my $err = eval { $J->decode($ev->[-2]{data}) };
ok($err && $err->{error} && $err->{error}{message},
   'engine killed: an error event comes before [DONE]')
    or diag($ev->[-2]{data});

$t0 = time;
$r = $t->completion(prompt => 'gone', max_tokens => 2);
is($r->{status}, 503, 'engine gone: 503');
ok(time - $t0 < 1, 'engine gone: answered within a second');
is($t->status->{json}{engine}, 'detached', 'engine gone: status detached');

$t->start_engine;
is(wait_serving()->{status}, 200, 'engine restarted: served again, no reload');

my $ok = 1;
for (1 .. 6) {
    $ok &&= $t->completion(prompt => 'each worker', max_tokens => 2)->{status} == 200;
}
ok($ok, 'both workers re-attached');
is($t->status->{json}{engine}, 'attached', 'status says attached');
ok($t->running('nginx'), 'nginx never restarted');

$t->finish;
done_testing;
