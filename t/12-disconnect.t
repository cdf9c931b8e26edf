#!/usr/bin/perl
# A client that goes away mid-generation aborts it: the engine stops
# running it and frees its KV blocks; nothing leaks, the server goes on.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new->start;

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
ok($ctx > 100, "max_model_len is $ctx");
my $long = $ctx - 20;

my $s = $t->stream_start('/v1/completions',
    $J->encode({ prompt => 'Go on and on', max_tokens => $long,
                 ignore_eos => JSON::PP::true, stream => JSON::PP::true }));
is($s->{status}, 200, 'long stream starts');

my $c = PagedLLM::Test::read_chunks([$s], time + 30, 3)
    ->[0];
ok(@{ $c->{chunks} } >= 3, 'some tokens arrived');

my $busy = $t->status->{json};
ok($busy->{requests}{running} + $busy->{requests}{waiting} >= 1
       && $busy->{kv_blocks}{used} >= 1,
   'while streaming: a request runs and holds KV blocks')
    or diag($J->encode($busy));

close $s->{sock};

my $st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{requests}{waiting} == 0
        && $_[0]{kv_blocks}{used} == 0
}, 5);
is($st->{json}{requests}{running}, 0, 'after disconnect: nothing running');
is($st->{json}{kv_blocks}{used}, 0, 'after disconnect: no KV block used');
is($st->{json}{kv_blocks}{free}, $st->{json}{kv_blocks}{total},
   'after disconnect: every block free');
ok($st->{json}{generation_tokens_total} < $long,
   'the generation stopped early')
    or diag($J->encode($st->{json}));

# a non-streaming request whose client leaves is aborted too (499)
my $ns = $t->send_request(POST => '/v1/completions',
    $J->encode({ prompt => 'Quietly', max_tokens => $long,
                 ignore_eos => JSON::PP::true }));
my $seen = $t->wait_status(sub { $_[0]{requests}{running} >= 1 }, 5);
ok($seen->{json}{requests}{running} >= 1, 'non-stream request runs');
close $ns;

$st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{kv_blocks}{used} == 0
}, 5);
is($st->{json}{requests}{running}, 0, 'non-stream disconnect: nothing running');
is($st->{json}{kv_blocks}{used}, 0, 'non-stream disconnect: no KV block used');

sub access_log {
    open my $fh, '<', $t->dir . '/access.log' or return '';
    local $/;
    return <$fh>;
}

my $deadline = time + 5;
sleep 0.05 until access_log() =~ / 499 / || time > $deadline;
like(access_log(), qr{"POST /v1/completions HTTP/1.1" 499 },
     'the access log says 499');

my $after = $t->completion(prompt => 'Still here', max_tokens => 4);
is($after->{status}, 200, 'the server still serves after disconnects');
unlike($t->error_log, qr/\[(alert|crit|emerg)\]/, 'no alerts in the error log');

$t->finish;
done_testing;
