#!/usr/bin/perl
# The status location reports the engine's state from the shared region.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $t = PagedLLM::Test->new->start;

my $r = $t->status;
is($r->{status}, 200, 'status: 200');
like($r->{headers}{'content-type'}, qr{^application/json}, 'status: JSON');

my $s = $r->{json};
is($s->{engine}, 'attached', 'engine attached');
is($s->{model}, 'tiny', 'model name');
is($s->{device}, 'cpu', 'device');
ok($s->{workers} >= 1, 'workers counted');
for my $k (qw(running waiting swapped)) {
    like($s->{requests}{$k}, qr/^\d+$/, "requests.$k is a count");
}
for my $k (qw(total used free block_size)) {
    like($s->{kv_blocks}{$k}, qr/^\d+$/, "kv_blocks.$k is a count");
}
is($s->{kv_blocks}{block_size}, 16, 'block size 16');
ok($s->{kv_blocks}{total} > 0, 'the KV pool has blocks');
is($s->{kv_blocks}{used} + $s->{kv_blocks}{free}, $s->{kv_blocks}{total},
   'used + free = total');
for my $k (qw(iterations requests_total prompt_tokens_total
              generation_tokens_total)) {
    like($s->{$k}, qr/^\d+$/, "$k is a count");
}

my $c = $t->completion(prompt => 'count me', max_tokens => 7,
                       ignore_eos => JSON::PP::true);
is($c->{status}, 200, 'a completion');

my $after = $t->wait_status(sub {
    $_[0]{requests_total} >= $s->{requests_total} + 1 }, 5)->{json};
is($after->{requests_total}, $s->{requests_total} + 1, 'requests_total counts it');
is($after->{generation_tokens_total}, $s->{generation_tokens_total} + 7,
   'generation_tokens_total counts its tokens');
is($after->{prompt_tokens_total},
   $s->{prompt_tokens_total} + $c->{json}{usage}{prompt_tokens},
   'prompt_tokens_total counts its prompt');
ok($after->{iterations} > $s->{iterations}, 'iterations advance');

is($t->request(HEAD => '/pagedllm/status')->{status}, 200, 'HEAD status: 200');

$t->finish;
done_testing;
