#!/usr/bin/perl
# 59-install.t: make install into a DESTDIR puts each file where Debian
# looks for it; the systemd units pass systemd-analyze verify (nginx's
# drop-in read with Debian's nginx.service); the engine started with the
# unit's own ExecStart line (paths mapped into DESTDIR, /run/pagedllm into
# a folder here) serves Debian's nginx loading the module through the
# installed modules-enabled snippet and the example configuration.  Then
# the run folders: tools/run.sh refuses a folder a live server uses,
# make bench's server (bench/serve.sh) runs beside make run's without
# touching its socket, and a stale socket is replaced.
use strict;
use warnings;

use lib 't/lib';
use FindBin;
use File::Temp qw(tempdir);
use IO::Socket::UNIX;
use POSIX qw(WNOHANG setsid);
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $root  = "$FindBin::Bin/..";
my $build = $ENV{PAGEDLLM_BUILD} or die "PAGEDLLM_BUILD is not set\n";
my $h     = PagedLLM::Test->new;
my $tmp   = $h->dir;
my $dest  = "$tmp/dest";

# ---- make install ---------------------------------------------------------

# the CUDA setting the build was made with, so that nothing is rebuilt
my $cuda = glob("$build/obj/kernels/*.cu.o") ? 1 : 0;
{
    local %ENV = %ENV;
    delete @ENV{qw(MAKEFLAGS MFLAGS MAKELEVEL)};
    my $out = `cd $root && make -s install BUILD=$build CUDA=$cuda \\
               PREFIX=/usr DESTDIR=$dest 2>&1`;
    is($?, 0, 'make install PREFIX=/usr DESTDIR=... succeeds')
        or diag($out);
}

for my $bin (qw(pagedllm-engine pagedllm-load pagedllm-sim
                pagedllm-tokenize)) {
    ok(-f "$dest/usr/bin/$bin" && -x _, "/usr/bin/$bin, executable");
}
ok(-f "$dest/usr/lib/nginx/modules/ngx_http_pagedllm_module.so",
   'the module in /usr/lib/nginx/modules, where Debian\'s nginx loads them');
my $avail = '/usr/share/nginx/modules-available/mod-http-pagedllm.conf';
is(slurp("$dest$avail"), "load_module modules/ngx_http_pagedllm_module.so;\n",
   "$avail loads it");
is(readlink("$dest/etc/nginx/modules-enabled/50-mod-http-pagedllm.conf"),
   $avail, 'modules-enabled links to it, as Debian\'s module packages do');
ok(-f "$dest/usr/share/pagedllm/models/kjv-small/$_", "kjv-small's $_")
    for qw(config.json generation_config.json model.safetensors
           tokenizer.json tokenizer_config.json README.md);
ok(!-e "$dest/usr/share/pagedllm/models/kjv-small/golden.json",
   'but not its goldens or training logs');
ok(-f "$dest/usr/share/pagedllm/nginx-pagedllm.conf",
   'the example nginx configuration in /usr/share/pagedllm');
ok(-f "$dest/usr/share/doc/pagedllm/README.md", 'the README in the docs');

my $units = "$dest/usr/lib/systemd/system";
my $unit = slurp("$units/pagedllm-engine.service");
my ($exec) = $unit =~ /^ExecStart=(.*)$/m;
like($exec, qr{^/usr/bin/pagedllm-engine
               \ --model\ /usr/share/pagedllm/models/kjv-small
               \ --listen\ /run/pagedllm/engine\.sock}x,
     'ExecStart: the installed engine, model and socket');
unlike($unit, qr/@[A-Z]+@/, 'every @PLACEHOLDER@ of the unit is filled');
like($unit, qr/^Restart=on-failure$/m, 'the engine is restarted on failure');
like($unit, qr/^DynamicUser=yes$/m, 'it runs as a user of its own');
like($unit, qr/^Group=www-data$/m, 'with nginx\'s group');
like($unit, qr/^RuntimeDirectory=pagedllm\nRuntimeDirectoryMode=0750$/m,
     '/run/pagedllm made at start, open to the group only');
like(slurp("$units/nginx.service.d/pagedllm.conf"),
     qr/^Wants=pagedllm-engine\.service$/m,
     'nginx\'s drop-in starts the engine with it');

# ---- systemd-analyze verify -----------------------------------------------

# the units as installed, their paths mapped into DESTDIR and /run/pagedllm
# into a folder here
my $run = "$tmp/run/pagedllm";
sub map_path {
    my ($s) = @_;
    $s =~ s{(^|[\s=])/usr/}{$1$dest/usr/}g;
    $s =~ s{/run/pagedllm\b}{$run}g;
    return $s;
}

SKIP: {
    my ($sa) = grep { -x } map { "$_/systemd-analyze" } split /:/,
                                  $ENV{PATH} // '';
    skip 'systemd-analyze is not installed (Debian package systemd)', 4
        unless $sa;

    my $v = "$tmp/verify";
    mkdir $v;
    mkdir "$v/nginx.service.d";
    spew("$v/pagedllm-engine.service", map_path($unit));
    spew("$v/nginx.service", slurp('/lib/systemd/system/nginx.service'));
    spew("$v/nginx.service.d/pagedllm.conf",
         slurp("$units/nginx.service.d/pagedllm.conf"));

    for my $u (qw(pagedllm-engine.service nginx.service)) {
        my $out = `$sa verify --man=no $v/$u 2>&1`;
        is($?, 0, "systemd-analyze verify $u: status 0");
        is($out, '', "systemd-analyze verify $u: no warning")
            or diag($out);
    }
}

# ---- the engine from ExecStart, Debian's nginx with the installed files ---

mkdir "$tmp/run";
mkdir $run, 0750;
my @cmd = split ' ', map_path($exec);
ok(-x $cmd[0], "ExecStart's program mapped into DESTDIR: $cmd[0]");
$h->spawn(engine => "$tmp/engine.log", @cmd);
my $sock = "$run/engine.sock";
ok(wait_listening($sock, 60), 'the engine of ExecStart listens')
    or $h->dump_logs;
is((stat $sock)[2] & 07777, 0660, 'its socket is 0660: for its group');

# Debian's layout: /usr/share/nginx/modules is nginx-common's link to
# /usr/lib/nginx/modules
symlink '../../lib/nginx/modules', "$dest/usr/share/nginx/modules";
my $port = PagedLLM::Test::free_port();
(my $site = map_path(slurp("$dest/usr/share/pagedllm/nginx-pagedllm.conf")))
    =~ s/127\.0\.0\.1:8080/127.0.0.1:$port/;
spew("$tmp/site.conf", $site);
my $user = $> == 0 ? 'user root;' : '';
spew("$tmp/nginx.conf", <<"EOF");
$user
include $dest$avail;
pid $tmp/nginx.pid;
error_log $tmp/error.log info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $tmp/body;
    include $tmp/site.conf;
}
EOF
$h->spawn(nginx => "$tmp/nginx.stderr", $h->{nginx},
          '-p', "$dest/usr/share/nginx/", '-c', "$tmp/nginx.conf",
          '-e', "$tmp/error.log", '-g', 'daemon off;');
$h->{port} = $port;
my $r = wait_status($h, 30);
is($r->{json}{engine}, 'attached',
   'nginx with the installed snippet and example attaches to the engine');
$r = $h->completion(prompt => 'Hello', max_tokens => 4,
                    ignore_eos => JSON::PP::true);
is($r->{status}, 200, 'and serves a completion');
is($r->{json}{usage}{completion_tokens}, 4, 'of the tokens asked for');
$r = $h->request(GET => '/nowhere');
is($r->{status}, 404, 'an unknown path: 404');
is($r->{json}{error}{code}, 'unknown_url',
   "in OpenAI's JSON (the snippet's error_page)");
$h->stop_all;

# ---- run folders ----------------------------------------------------------

# a build folder of links to the real one, so that the run folders are
# this test's
my $b = "$tmp/build";
mkdir $b;
mkdir "$b/bench";
symlink "$build/$_", "$b/$_"
    for qw(pagedllm-engine ngx_http_pagedllm_module.so models);
symlink "$build/bench/pagedllm-load", "$b/bench/pagedllm-load";

my %env = (PAGEDLLM_DEVICE => 'cpu',
           PAGEDLLM_ENGINE_ARGS => '--threads 1 --kv-cache-memory 16');

# tools/run.sh (or bench/serve.sh) in a session of its own; its pid
sub start_script {
    my ($log, %e) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        setsid();
        @ENV{keys %env} = values %env;
        @ENV{keys %e} = values %e;
        open STDOUT, '>', $log or die;
        open STDERR, '>&', \*STDOUT or die;
        chdir $root or die;
        exec 'tools/run.sh', $b or die "exec: $!";
    }
    return $pid;
}

sub stop_script {
    my ($pid) = @_;
    kill 'TERM', -$pid;
    my $deadline = time + 15;
    while (waitpid($pid, WNOHANG) == 0 && time < $deadline) {
        sleep 0.05;
    }
}

my $port_a = PagedLLM::Test::free_port();
my $a = start_script("$tmp/run-a.log", PAGEDLLM_PORT => $port_a);
$h->{port} = $port_a;
$r = wait_status($h, 60);
is($r->{json}{engine}, 'attached', 'tools/run.sh serves from BUILD/run')
    or diag(slurp("$tmp/run-a.log"));
ok(-S "$b/run/engine.sock" && -s "$b/run/engine.pid",
   'its socket and engine pid file are in BUILD/run');

my $out = `cd $root && PAGEDLLM_PORT=$port_a tools/run.sh $b 2>&1`;
isnt($? >> 8, 0, 'a second tools/run.sh on the same folder exits');
like($out, qr/\Q$b\E\/run is in use by a running server \(pid \d+/,
     'saying which server uses the folder');
ok(-S "$b/run/engine.sock", 'the first server\'s socket is still there');

{
    local %ENV = (%ENV, %env, BENCH_PORT => PagedLLM::Test::free_port(),
                  BENCH_CONC => 1, BENCH_REQUESTS => 2, BENCH_PROMPT => 8,
                  BENCH_GEN => 4);
    $out = `cd $root && bench/serve.sh $b 2>&1`;
}
is($?, 0, 'make bench\'s script runs beside it')
    or diag($out, slurp("$b/bench-serve.log"));
like($out, qr/^1\s+\d/m, 'and prints its row');
ok(-d "$b/bench-run" && !-e "$b/bench-run/engine.sock",
   'in its own run folder, BUILD/bench-run, its socket gone after it');
ok(-S "$b/run/engine.sock" && -s "$b/run/engine.pid",
   'the first server\'s socket and pid file are untouched');
$r = $h->completion(prompt => 'Hello', max_tokens => 2);
is($r->{status}, 200, 'and it still serves');

stop_script($a);
ok(!-e "$b/run/engine.sock" && !-e "$b/run/engine.pid",
   'stopped: the engine removed its socket, run.sh its pid file');

# a stale socket (no process listens) and a stale pid file
my $stale = IO::Socket::UNIX->new(Local => "$b/run/engine.sock", Listen => 1)
    or die "stale socket: $!";
close $stale;
my $dead = fork // die;
exit 0 if $dead == 0;
waitpid $dead, 0;
spew("$b/run/engine.pid", "$dead\n");
ok(-S "$b/run/engine.sock", 'a stale socket and pid file are left');
$a = start_script("$tmp/run-b.log", PAGEDLLM_PORT => $port_a);
$r = wait_status($h, 60);
is($r->{json}{engine}, 'attached',
   'tools/run.sh starts over them: the engine replaced the stale socket')
    or diag(slurp("$tmp/run-b.log"));
stop_script($a);

done_testing;

# ---- helpers --------------------------------------------------------------

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    return <$fh>;
}

sub spew {
    my ($f, $s) = @_;
    open my $fh, '>', $f or die "$f: $!";
    print $fh $s;
    close $fh;
}

sub wait_listening {
    my ($path, $timeout) = @_;
    my $deadline = time + $timeout;
    while (time < $deadline) {
        return 1 if IO::Socket::UNIX->new(Peer => $path);
        sleep 0.1;
    }
    return 0;
}

sub wait_status {
    my ($t, $timeout) = @_;
    my $deadline = time + $timeout;
    my $r = {};
    while (time < $deadline) {
        $r = eval { $t->status } // {};
        return $r if ($r->{json}{engine} // '') eq 'attached';
        sleep 0.2;
    }
    return $r;
}
