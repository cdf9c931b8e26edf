package PagedLLM::Test;

# Integration harness: starts a real pagedllm-engine and a real nginx with
# our module on loopback, and speaks raw HTTP/1.1 to it so that chunked
# streams can be checked byte by byte.  Core Perl only.
#
#   my $t = PagedLLM::Test->new(http => '...', server => '...');
#   $t->start;                      # engine, then nginx; dies if either fails
#   my $r = $t->request(POST => '/v1/completions', $json);
#   my $s = $t->stream('/v1/completions', $json);   # chunks with timestamps
#
# A failing test prints the engine's and nginx's logs.  Nothing is skipped:
# when the engine or nginx does not start, the test dies (and so fails).

use strict;
use warnings;

use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw(WNOHANG);
use Scalar::Util qw(weaken);
use Test::More;
use Time::HiRes qw(time sleep);

our $JSON = JSON::PP->new->utf8->canonical->allow_nonref;
our $SEQ = 0;       # order in which chunks of all streams arrived
my %live;           # the harnesses not destroyed yet, weakly
my $died;           # the test died outside an eval

# A test that dies outside an eval fails though Test::More has not seen it
# yet: the harnesses it leaves, destroyed as the exit unwinds, print their
# logs all the same.
$SIG{__DIE__} = sub { $died = 1 if defined $^S && !$^S };

# Seconds to wait at most, times PAGEDLLM_TEST_TIME_SCALE (make
# test-sanitize sets 4: its processes run several times slower).  Only
# bounds on waiting are scaled: a wait ends as soon as what it waits for
# happens, so a longer bound never makes a check pass.
sub scaled { $_[0] * ($ENV{PAGEDLLM_TEST_TIME_SCALE} || 1) }

sub new {
    my ($class, %opt) = @_;

    my $build = $ENV{PAGEDLLM_BUILD}
        or die "PAGEDLLM_BUILD is not set (run the tests with make test)\n";

    my $self = bless {
        build   => $build,
        # make test-sanitize's nginx, built with AddressSanitizer and UBSan
        nginx   => $ENV{PAGEDLLM_NGINX} // '/usr/sbin/nginx',
        dir     => tempdir('pagedllm-t-XXXXXX', TMPDIR => 1, CLEANUP => 1),
        main    => $opt{main} // '',
        http    => $opt{http} // '',
        server  => $opt{server} // '',
        listen  => $opt{listen} // '',
        # the test server's API location; '' leaves it to {server}
        api     => $opt{api} // "        location /v1/ {\n"
                                . "            pagedllm;\n        }\n",
        workers => $opt{workers} // 1,
        worker_connections => $opt{worker_connections} // 256,
        engine_args => $opt{engine_args} // [],
        model   => $opt{model} // "$build/models/tiny",
        pids    => {},
        owner   => $$,      # a forked child leaves the servers alone
    }, $class;

    $live{$self} = $self;
    weaken($live{$self});
    $self->{port} = free_port();
    $self->{sock} = "$self->{dir}/engine.sock";
    # the engines nginx attaches to (t/67-engines*: pagedllm_engines groups)
    $self->{engines_conf} = $opt{engines_conf}
                            // "pagedllm_engine unix:$self->{sock};";

    for my $f ("$build/pagedllm-engine", "$build/ngx_http_pagedllm_module.so",
               "$build/models/tiny/config.json")
    {
        die "$f is missing: build with make first\n" unless -e $f;
    }

    return $self;
}

sub port { $_[0]{port} }
sub dir  { $_[0]{dir} }

sub free_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp', Listen => 1, ReuseAddr => 1)
        or die "cannot bind a loopback port: $!\n";
    my $port = $s->sockport;
    close $s;
    return $port;
}

sub start {
    my ($self) = @_;
    $self->start_engine;
    $self->start_nginx;
    return $self;
}

sub spawn {
    my ($self, $name, $log, @cmd) = @_;

    my $pid = fork;
    die "fork: $!\n" unless defined $pid;

    if ($pid == 0) {
        open STDOUT, '>>', $log or die "$log: $!";
        open STDERR, '>&', \*STDOUT or die "dup: $!";
        exec @cmd or die "exec $cmd[0]: $!";
    }

    $self->{pids}{$name} = $pid;
    return $pid;
}

sub running {
    my ($self, $name) = @_;
    my $pid = $self->{pids}{$name} or return 0;
    return 1 if waitpid($pid, WNOHANG) == 0;
    delete $self->{pids}{$name};
    return 0;
}

sub start_engine {
    my ($self) = @_;
    $self->spawn_engine('engine', $self->{sock}, $self->{model},
                        @{ $self->{engine_args} });
}

# A CPU engine named $name (log $name.log) on $sock; returns once it
# listens.
sub spawn_engine {
    my ($self, $name, $sock, $model, @args) = @_;

    unlink $sock;
    $self->spawn($name => "$self->{dir}/$name.log",
                 "$self->{build}/pagedllm-engine", '--model', $model,
                 '--device', 'cpu', '--listen', $sock,
                 '--threads', '1', '--kv-cache-memory', '16', @args);

    my $deadline = time + scaled(30);
    until (-S $sock) {
        $self->running($name)
            or $self->fail_start("pagedllm-engine ($name) exited before "
                                 . "listening");
        time < $deadline
            or $self->fail_start("pagedllm-engine ($name) did not listen in "
                                 . "30 s");
        sleep 0.05;
    }
}

sub stop_engine {
    my ($self, $signal) = @_;
    $self->stop('engine', $signal // 'TERM');
    unlink $self->{sock};
}

sub write_conf {
    my ($self) = @_;
    my $d = $self->{dir};
    my $user = $> == 0 ? 'user root;' : '';

    mkdir "$d/logs";
    open my $fh, '>', "$d/nginx.conf" or die "$d/nginx.conf: $!";
    print $fh <<"EOF";
load_module $self->{build}/ngx_http_pagedllm_module.so;
$user
worker_processes $self->{workers};
pid $d/nginx.pid;
error_log $d/error.log info;
$self->{main}

events {
    worker_connections $self->{worker_connections};
}

http {
    access_log $d/access.log;
    client_body_temp_path $d/client_body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;

    $self->{engines_conf}
    pagedllm_reattach_interval 200ms;
$self->{http}

    server {
        listen 127.0.0.1:$self->{port} $self->{listen};

$self->{api}
        location = /pagedllm/status {
            pagedllm_status;
        }
$self->{server}
    }
}
EOF
    close $fh;
}

sub start_nginx {
    my ($self) = @_;
    my $d = $self->{dir};

    $self->write_conf;
    $self->spawn(nginx => "$d/nginx.stderr", $self->{nginx}, '-p', "$d/",
                 '-c', "$d/nginx.conf", '-e', "$d/error.log",
                 '-g', 'daemon off;');

    my $deadline = time + scaled(10);
    while (1) {
        $self->running('nginx')
            or $self->fail_start("nginx exited at start");
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $self->{port},
                                      Proto => 'tcp');
        if ($s) {
            close $s;
            last;
        }
        time < $deadline
            or $self->fail_start("nginx did not listen in time");
        sleep 0.05;
    }
}

sub stop {
    my ($self, $name, $signal) = @_;
    my $pid = delete $self->{pids}{$name} or return;

    kill $signal // 'TERM', $pid;
    my $deadline = time + scaled(10);
    while (waitpid($pid, WNOHANG) == 0) {
        if (time > $deadline) {
            kill 'KILL', $pid;
            waitpid($pid, 0);
            last;
        }
        sleep 0.02;
    }
}

sub fail_start {
    my ($self, $why) = @_;
    $self->dump_logs;
    $self->stop_all;
    die "$why\n";
}

sub stop_all {
    my ($self) = @_;
    $self->stop('nginx', 'TERM');
    $self->stop('engine', 'TERM');
    $self->stop($_, 'TERM') for grep { /^engine\d+$/ } keys %{ $self->{pids} };
}

sub dump_logs {
    my ($self) = @_;
    my @engines = map { "engine$_.log" } 0 .. 7;
    for my $f (qw(engine.log nginx.stderr error.log), @engines) {
        my $p = "$self->{dir}/$f";
        next unless -s $p;
        open my $fh, '<', $p or next;
        diag("--- $f");
        diag($_) for <$fh>;
    }
}

sub error_log {
    my ($self) = @_;
    open my $fh, '<', "$self->{dir}/error.log" or return '';
    local $/;
    return <$fh>;
}

# Stops nginx and the engine; prints their logs when a test failed.
sub finish {
    my ($self) = @_;
    unlike($self->error_log, qr/exited on signal/, 'no nginx worker crashed');
    $self->logs_once;
    $self->stop_all;
}

sub failing { $died || !(eval { Test::More->builder->is_passing } // 1) }

# The servers' logs, once, if the test failed.
sub logs_once {
    my ($self) = @_;
    local $@;
    eval { $self->dump_logs } if !$self->{logs_dumped} && failing();
    $self->{logs_dumped} = 1;
}

# A harness destroyed without finish prints its logs when the test failed,
# and stops its servers, in the process that started them only.
# Those still alive at exit print them here, while Test::More can (at
# global destruction, where their DESTROY runs, its state may be gone).
END {
    local $?;
    $_->logs_once for grep { defined && $_->{owner} == $$ } values %live;
}

sub DESTROY {
    my ($self) = @_;
    return if $self->{owner} != $$;
    local $?;
    delete $live{$self};
    $self->logs_once;
    $self->stop_all;
}

# ---- several engines (t/67-engines*) ----------------------------------------

sub engine_sock { "$_[0]{dir}/engine$_[1].sock" }

# Starts engine N (named engineN, log engineN.log) on engine_sock(N), with
# its own model and arguments when given; returns once it listens.
sub start_engine_n {
    my ($self, $n, %o) = @_;
    $self->spawn_engine("engine$n", $self->engine_sock($n),
                        $o{model} // $self->{model}, @{ $o{args} // [] });
}

sub stop_engine_n {
    my ($self, $n, $signal) = @_;
    $self->stop("engine$n", $signal // 'TERM');
    unlink $self->engine_sock($n);
}

# ---- HTTP ----------------------------------------------------------------

sub connect {
    my ($self) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $self->{port}, Proto => 'tcp',
                                  Timeout => 5)
        or die "connect to nginx: $!\n";
    binmode $s;
    return $s;
}

sub send_request {
    my ($self, @req) = @_;
    my $s = $self->connect;
    syswrite_all($s, $self->raw_request(@req));
    return $s;
}

sub raw_request {
    my ($self, $method, $path, $body, %h) = @_;

    $body //= '';
    my $req = "$method $path HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    $req .= "Connection: close\r\n" unless $h{'Connection'};
    $req .= "Content-Type: application/json\r\n" if length $body;
    $req .= "Content-Length: " . length($body) . "\r\n"
        if length $body || $method eq 'POST';
    $req .= "$_: $h{$_}\r\n" for sort keys %h;
    return $req . "\r\n" . $body;
}

sub syswrite_all {
    my ($s, $data) = @_;
    while (length $data) {
        my $n = syswrite($s, $data);
        die "write: $!\n" unless defined $n;
        substr($data, 0, $n, '');
    }
}

# Reads from a socket into a buffer, waiting at most until $deadline.
sub fill {
    my ($s, $buf, $deadline) = @_;
    my $left = $deadline - time;
    return -1 if $left <= 0;
    return -1 unless IO::Select->new($s)->can_read($left);
    my $n = sysread($s, $$buf, 65536, length $$buf);
    return defined $n ? $n : 0;
}

sub read_head {
    my ($s, $buf, $deadline) = @_;
    while ($$buf !~ /\r\n\r\n/) {
        my $n = fill($s, $buf, $deadline);
        return undef if $n <= 0;
    }
    $$buf =~ s/^(.*?)\r\n\r\n//s;
    my ($line, @lines) = split /\r\n/, $1;
    my ($status) = $line =~ m{^HTTP/1\.[01] (\d{3})} or return undef;
    my %h;
    for (@lines) {
        my ($k, $v) = /^([^:]+):\s*(.*)$/ or next;
        $h{lc $k} = $v;
    }
    return { status => $status, headers => \%h };
}

# A whole response: { status, headers, body, json }.
sub request {
    my ($self, $method, $path, $body, %h) = @_;
    my $timeout = delete $h{timeout} // 30;
    my $s = $self->send_request($method, $path, $body, %h);
    return read_response($s, time + scaled($timeout), $method);
}

# A response's JSON, after a test named NAME that it came with 200 (the
# body in the diagnostics when not); {} when it has none.
sub json_ok {
    my ($self, $r, $name) = @_;
    is($r->{status}, 200, "$name: 200") or diag($r->{body});
    return $r->{json} // {};
}

# The token ids /v1/tokenize gives TEXT (the model's special tokens added
# as a prompt's are).
sub token_ids {
    my ($self, $text) = @_;
    return $self->request(POST => '/v1/tokenize',
                          $JSON->encode({ prompt => $text }))->{json}{tokens};
}

# The whole response on a socket send_request opened (closed after):
# { status, headers, body, json }; status 0 when no head came by $deadline.
sub read_response {
    my ($s, $deadline, $method) = @_;
    my $buf = '';

    my $r = read_head($s, \$buf, $deadline)
        or return { status => 0, error => 'no response head' };

    if (($r->{headers}{'transfer-encoding'} // '') eq 'chunked') {
        my $c = read_chunks([{ sock => $s, buf => $buf }], $deadline)->[0];
        $r->{body} = join '', map { $_->{data} } @{ $c->{chunks} };
        $r->{framing_error} = $c->{error};
    } else {
        my $len = $r->{headers}{'content-length'};
        while (1) {
            last if defined $len && length $buf >= $len;
            last if ($method // '') eq 'HEAD';
            last if fill($s, \$buf, $deadline) <= 0;
        }
        $r->{body} = $buf;
    }

    $r->{json} = eval { $JSON->decode($r->{body}) }
        if ($r->{headers}{'content-type'} // '') =~ m{application/json};
    close $s;
    return $r;
}

# A completion, or with $chat a chat completion, whose body is written
# from raw JSON texts (field => 'JSON'), so a test can send any value of
# any type; max_tokens 2 and a short prompt or conversation unless given.
sub post_fields {
    my ($self, $chat, %f) = @_;
    $f{max_tokens} //= 2;
    if ($chat) {
        $f{messages} //= '[{"role":"user","content":"Say something."}]';
    } else {
        $f{prompt} //= '"Hi"';
    }
    my $body = '{' . join(',', map { "\"$_\":$f{$_}" } sort keys %f) . '}';
    return $self->request(POST => $chat ? '/v1/chat/completions'
                                        : '/v1/completions', $body);
}

# Starts a streaming request; returns { sock, status, headers, buf }.
sub stream_start {
    my ($self, $path, $body) = @_;
    my $s = $self->send_request(POST => $path, $body);
    my $buf = '';
    my $r = read_head($s, \$buf, time + scaled(30))
        or die "no response head\n";
    $r->{sock} = $s;
    $r->{buf} = $buf;
    return $r;
}

# Reads the chunked bodies of several streams (from stream_start) at once,
# checking the framing byte by byte.  Returns, per stream, { chunks =>
# [{ data, time, seq }], complete, error }.  $max_chunks stops reading a
# stream early (for disconnect tests); what was read stays in its buffer.
sub read_chunks {
    my ($streams, $deadline, $max_chunks) = @_;
    my @st = map { { sock => $_->{sock}, buf => $_->{buf} // '',
                     chunks => [], done => 0, stream => $_ } } @$streams;

    while (grep { !$_->{done} } @st) {
        for my $x (grep { !$_->{done} } @st) {
            parse_chunks($x);
            $x->{done} = 1 if $max_chunks && @{ $x->{chunks} } >= $max_chunks;
        }
        my @open = grep { !$_->{done} } @st or last;
        my $left = $deadline - time;
        if ($left <= 0) {
            $_->{error} //= 'timeout' for @open;
            last;
        }
        my $sel = IO::Select->new(map { $_->{sock} } @open);
        for my $fh ($sel->can_read($left)) {
            my ($x) = grep { $_->{sock} == $fh } @open;
            my $n = sysread($fh, $x->{buf}, 65536, length $x->{buf});
            if (!$n) {
                parse_chunks($x);
                unless ($x->{done}) {
                    $x->{error} //= 'connection closed before the last chunk';
                    $x->{done} = 1;
                }
            }
        }
    }

    $_->{stream}{buf} = $_->{buf} for @st;

    return [ map { { chunks => $_->{chunks}, error => $_->{error},
                     complete => $_->{complete} } } @st ];
}

sub parse_chunks {
    my ($x) = @_;
    while (!$x->{done}) {
        my $b = \$x->{buf};
        my $i = index($$b, "\r\n");
        return if $i < 0;
        my $line = substr($$b, 0, $i);
        if ($line !~ /^[0-9a-fA-F]+$/) {
            $x->{error} = "bad chunk size line '$line'";
            $x->{done} = 1;
            return;
        }
        my $size = hex $line;
        if ($size == 0) {
            return if length $$b < $i + 4;
            if (substr($$b, $i + 2, 2) ne "\r\n") {
                $x->{error} = 'bad last chunk';
            }
            substr($$b, 0, $i + 4, '');
            $x->{complete} = 1;
            $x->{done} = 1;
            return;
        }
        return if length $$b < $i + 2 + $size + 2;
        if (substr($$b, $i + 2 + $size, 2) ne "\r\n") {
            $x->{error} = 'chunk data not followed by CRLF';
            $x->{done} = 1;
            return;
        }
        push @{ $x->{chunks} }, { data => substr($$b, $i + 2, $size),
                                  time => time, seq => ++$SEQ };
        substr($$b, 0, $i + 2 + $size + 2, '');
    }
}

# SSE: returns the list of event payloads (the text after "data: "), with
# each event's arrival time, and an error when the text is not exactly a
# sequence of "data: ...\n\n" events.
sub sse_events {
    my ($chunks) = @_;
    my (@events, $rest);
    $rest = '';
    for my $c (@$chunks) {
        $rest .= $c->{data};
        while ($rest =~ s/^data: ([^\n]*)\n\n//) {
            push @events, { data => $1, time => $c->{time} };
        }
    }
    return (\@events, length $rest ? "trailing bytes: '$rest'" : undef);
}

sub status {
    my ($self) = @_;
    return $self->request(GET => '/pagedllm/status');
}

# Polls the status endpoint until $cond->($json) holds or $timeout passes.
sub wait_status {
    my ($self, $cond, $timeout) = @_;
    my $deadline = time + scaled($timeout // 5);
    my $r;
    while (1) {
        $r = $self->status;
        return $r if $r->{json} && $cond->($r->{json});
        return $r if time > $deadline;
        sleep 0.05;
    }
}

sub completion {
    my ($self, %req) = @_;
    return $self->request(POST => '/v1/completions', $JSON->encode(\%req));
}

# POSTs %req with stream: true to $path and reads the SSE stream to its
# end: { status, error (framing or SSE), done ([DONE] came last), events
# (the other payloads, decoded) }.
sub stream_json {
    my ($self, $path, %req) = @_;
    my $body = $JSON->encode({ %req, stream => JSON::PP::true });
    my $s = $self->stream_start($path, $body);
    my $c = read_chunks([$s], time + scaled(60))->[0];
    close $s->{sock};
    my ($ev, $err) = sse_events($c->{chunks});
    my @data = map { $_->{data} } @$ev;
    my $done = @data && $data[-1] eq '[DONE]';
    pop @data if $done;
    return { status => $s->{status}, error => $c->{error} // $err,
             done => $done, events => [ map { $JSON->decode($_) } @data ] };
}

# nginx -t with the given arguments (a string): its output, with $? set.
# nginx's test mode returns from main without freeing main's first pool
# (the process ends there, by nginx's design), so under make test-sanitize
# LeakSanitizer is off for this one process; the configuration's parsing
# is leak-checked in every server the tests start, whose master frees its
# cycle when it exits (docs/RELIABILITY.md, Sanitizers).
sub nginx_test_config {
    my ($self, $args) = @_;
    local $ENV{ASAN_OPTIONS} = join ':', grep { length }
                               $ENV{ASAN_OPTIONS} // '', 'detect_leaks=0';
    return scalar `$self->{nginx} -t $args 2>&1`;
}

1;
