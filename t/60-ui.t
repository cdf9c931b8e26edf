#!/usr/bin/perl
# pagedllm_ui over plain HTTP: the page is ui/index.html byte for byte
# (compiled into the module), and /ui/blockmap is the engine's live KV
# block map: every block free while idle; during a long generation the
# request owns its blocks under the id of its X-Request-Id and the map is
# rewritten several times a second; n = 2 shares the prompt's blocks
# (refcount 2); after the client leaves no block is used and the prefix
# cache keeps the full ones; a request swapped out shows its blocks on
# the host pool.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;

# a model whose vocabulary is padded to 32768 ids: its lm_head makes each
# token cost milliseconds on one core, so a generation lasts seconds
my $probe = PagedLLM::Test->new;
my $slow = $probe->dir . '/slow';
system("$ENV{PAGEDLLM_BUILD}/mktinymodel", '--vocab-size', '32768', $slow)
    == 0 or die "mktinymodel --vocab-size 32768 failed\n";

my $ui = "        location /ui/ { pagedllm_ui; }\n";
my $t = PagedLLM::Test->new(model => $slow, server => $ui)->start;
$t->wait_status(sub { $_[0]{engine} eq 'attached' }, 10);

open my $fh, '<:raw', 'ui/index.html' or die "ui/index.html: $!";
my $page = do { local $/; <$fh> };
close $fh;

my $r = $t->request(GET => '/ui/');
is($r->{status}, 200, 'GET /ui/: 200');
like($r->{headers}{'content-type'}, qr{^text/html; charset=utf-8},
     'the page is HTML');
ok($r->{body} eq $page, 'the page is ui/index.html byte for byte');
is($t->request(HEAD => '/ui/')->{body}, '', 'HEAD /ui/: no body');
is($t->request(POST => '/ui/', '{}')->{status}, 405, 'POST /ui/: 405');
is($t->request(GET => '/ui/other')->{status}, 404, 'GET /ui/other: 404');

sub map_now {
    my ($tt) = @_;
    my $x = $tt->request(GET => '/ui/blockmap');
    return undef unless $x->{status} == 200 && $x->{json};
    my $m = $x->{json};
    my %n = (used => 0, shared => 0, cached => 0, blocks => 0,
             host_used => 0, host => 0, foreign => 0);
    for my $run (@{ $m->{device} }) {
        my ($owner, $ref, $flags, $count) = @$run;
        $n{blocks} += $count;
        $n{used} += $count if $ref > 0;
        $n{shared} += $count if $ref > 1;
        $n{cached} += $count if $flags & 1;
        $n{foreign} += $count if $ref > 0 && $owner == 0;
    }
    for my $run (@{ $m->{host} }) {
        $n{host} += $run->[3];
        $n{host_used} += $run->[3] if $run->[1] > 0;
    }
    $m->{n} = \%n;
    return $m;
}

sub wait_map {
    my ($tt, $cond, $timeout) = @_;
    my $deadline = time + ($timeout // 10);
    my $m;
    while (time < $deadline) {
        $m = map_now($tt);
        return $m if $m && $cond->($m);
        sleep 0.02;
    }
    return $m;
}

my $m = map_now($t);
ok($m, 'GET /ui/blockmap: 200 JSON');
is($t->request(GET => '/ui/blockmap')->{headers}{'cache-control'}, 'no-store',
   'the map is never cached');
is($m->{block_size}, 16, 'block size 16');
ok($m->{num_blocks} > 0, "the device pool: $m->{num_blocks} blocks");
is($m->{n}{blocks}, $m->{num_blocks}, 'the runs cover every device block');
is($m->{n}{used}, 0, 'idle: no block used');
is_deeply($m->{owners}, [], 'idle: no owner');

# one long generation, left mid-stream
my $s = $t->stream_start('/v1/completions', $J->encode({
    prompt => 'A long story, block after block', max_tokens => 1500,
    ignore_eos => $T, stream => $T }));
is($s->{status}, 200, 'long stream starts');
(my $id = $s->{headers}{'x-request-id'} // '') =~ s/^cmpl-//;
$m = wait_map($t, sub { @{ $_[0]{owners} } == 1
                        && $_[0]{owners}[0]{tokens} > 40 });
is(scalar @{ $m->{owners} }, 1, 'during the run: one owner');
is($m->{owners}[0]{id}, $id, 'the owner is the X-Request-Id\'s request');
is($m->{owners}[0]{state}, 'running', 'running');
# the last token drawn has no KV slot until the next step runs it, so
# between steps n tokens need blocks for n - 1
ok($m->{n}{used} >= int(($m->{owners}[0]{tokens} - 1 + 15) / 16),
   "its $m->{owners}[0]{tokens} tokens hold $m->{n}{used} blocks");
is($m->{n}{foreign}, 0, 'every used block is owned');
my ($u0, $t0) = ($m->{updates}, time);
sleep 1;
$m = map_now($t);
my $rate = ($m->{updates} - $u0) / (time - $t0);
ok($rate >= 3, sprintf('rewritten several times a second (%.1f/s)', $rate));
close $s->{sock};
$m = wait_map($t, sub { $_[0]{n}{used} == 0 });
is($m->{n}{used}, 0, 'client gone: no block used');
is_deeply($m->{owners}, [], 'client gone: no owner');
ok($m->{n}{cached} > 0, "the prefix cache keeps $m->{n}{cached} full blocks");

# n = 2: both sequences hold the prompt's blocks
$s = $t->stream_start('/v1/completions', $J->encode({
    prompt => 'Two ways to go on from one shared prompt of words',
    max_tokens => 1500, n => 2, temperature => 1, ignore_eos => $T,
    stream => $T }));
$m = wait_map($t, sub { @{ $_[0]{owners} } && $_[0]{owners}[0]{seqs} == 2 });
is($m->{owners}[0]{seqs}, 2, 'n = 2: one owner with two sequences');
ok($m->{n}{shared} > 0, "n = 2: $m->{n}{shared} blocks have refcount 2");
close $s->{sock};
$m = wait_map($t, sub { $_[0]{n}{used} == 0 });
is($m->{n}{used}, 0, 'n = 2 gone: no block used');

# swapping: 10 device blocks for two requests of 150 tokens
my $sw = PagedLLM::Test->new(model => $slow, server => $ui,
    engine_args => ['--num-blocks', '10', '--preemption-mode', 'swap',
                    '--swap-space', '4'])->start;
$sw->wait_status(sub { $_[0]{engine} eq 'attached' }, 10);
my @s = map {
    $sw->stream_start('/v1/completions', $J->encode({
        prompt => "Swap me $_", max_tokens => 150, ignore_eos => $T,
        stream => $T }))
} 1 .. 2;
$m = wait_map($sw, sub { $_[0]{n}{host_used} > 0 }, 30);
ok($m->{num_host_blocks} > 0, "a host pool of $m->{num_host_blocks} blocks");
ok($m->{n}{host_used} > 0, "$m->{n}{host_used} blocks swapped out");
ok((grep { $_->{state} eq 'swapped' } @{ $m->{owners} }),
   'their request is marked swapped');
my $r2 = PagedLLM::Test::read_chunks(\@s, time + 60);
ok(!grep({ !$_->{complete} } @$r2), 'both swapped streams complete');
$m = wait_map($sw, sub { $_[0]{n}{used} + $_[0]{n}{host_used} == 0 });
is($m->{n}{used} + $m->{n}{host_used}, 0, 'after both: no block used');

done_testing;
