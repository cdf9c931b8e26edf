#!/usr/bin/perl
# tools/run.sh --engines N: N engines behind one nginx in one group, each
# on its own socket, all served; stopped, every engine's pid file goes.
# --per-gpu with no GPU visible says so.  pagedllm-engine --device cuda:N
# takes a device number, and refuses one with tensor parallelism.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(getcwd);
use POSIX qw(setsid WNOHANG);
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $build = $ENV{PAGEDLLM_BUILD} or die "PAGEDLLM_BUILD is not set\n";
my $root = getcwd();
my $h = PagedLLM::Test->new;
my $run = $h->dir . '/run';

$h->{port} = PagedLLM::Test::free_port();
my $pid = fork // die "fork: $!";
if ($pid == 0) {
    setsid();
    $ENV{PAGEDLLM_PORT} = $h->{port};
    $ENV{PAGEDLLM_RUN_DIR} = $run;
    $ENV{PAGEDLLM_DEVICE} = 'cpu';
    $ENV{PAGEDLLM_ENGINE_ARGS} = '--threads 1 --kv-cache-memory 16';
    open STDOUT, '>', $h->dir . '/run.log' or die;
    open STDERR, '>&', \*STDOUT or die;
    exec 'tools/run.sh', '--engines', '2', $build or die "exec: $!";
}

my $st;
my $deadline = time + 60;
while (time < $deadline) {
    $st = eval { $h->status->{json} };
    last if $st && (grep { $_->{engine} eq 'attached' }
                    @{ $st->{engines} // [] }) == 2;
    sleep 0.1;
}
is_deeply([ map { $_->{name} } @{ $st->{engines} // [] } ],
          [ "$run/engine0.sock", "$run/engine1.sock" ],
          'run.sh --engines 2: two engines, each on its own socket')
    or diag(`cat $run/../run.log`);
is_deeply([ map { $_->{engine} } @{ $st->{engines} // [] } ],
          [ 'attached', 'attached' ], 'both attached');
ok(-s "$run/engine0.pid" && -s "$run/engine1.pid", 'a pid file each');

my $ok = 1;
for (1 .. 4) {
    $ok &&= $h->completion(prompt => 'Hi', max_tokens => 2)->{status} == 200;
}
ok($ok, 'served');
my $big = $h->request(POST => '/v1/completions',
                      '{"prompt":"' . ('x' x 1_100_000) . '"}');
is($big->{status}, 413, 'a body over client_max_body_size: 413');
is($big->{json}{error}{code}, 'request_too_large',
   "in OpenAI's JSON (run.sh's error_page)");
my $nf = $h->request(GET => '/nowhere');
is($nf->{json}{error}{code}, 'unknown_url', 'an unknown path: JSON too');
my $conf = do { local (@ARGV, $/) = "$run/conf/nginx.conf"; <> };
like($conf, qr/pagedllm_engines local \{.*engine0\.sock.*engine1\.sock/s,
     'one pagedllm_engines group');
like($conf, qr/pagedllm_route least_load;/, 'routed by least_load');

kill 'TERM', -$pid;
$deadline = time + 15;
sleep 0.05 while waitpid($pid, WNOHANG) == 0 && time < $deadline;
ok(!-e "$run/engine0.pid" && !-e "$run/engine1.pid",
   'stopped: both pid files removed');

my $out = `cd $root && CUDA_VISIBLE_DEVICES= tools/run.sh --per-gpu $build 2>&1`;
isnt($? >> 8, 0, 'run.sh --per-gpu with CUDA_VISIBLE_DEVICES empty: fails');
like($out, qr/no GPU is visible/, 'and says why');
$out = `cd $root && tools/run.sh --engines x $build 2>&1`;
is($? >> 8, 2, 'run.sh --engines x: usage');

my $engine = "$build/pagedllm-engine --model $build/models/tiny "
             . "--listen " . $h->dir . '/x.sock';
$out = `$engine --device cuda:x 2>&1`;
is($? >> 8, 2, '--device cuda:x: a usage error');
like($out, qr/--device: bad value 'cuda:x'/, 'naming the value');
$out = `$engine --device cuda:1 --tensor-parallel-size 2 2>&1`;
is($? >> 8, 2, '--device cuda:1 with tensor parallelism: refused');
like($out, qr/CUDA_VISIBLE_DEVICES/, 'pointing to CUDA_VISIBLE_DEVICES');

done_testing;
