#!/usr/bin/perl
# pagedllm_health: GET /health answers 200 with an empty body while the
# worker is attached and the engine's heartbeat (its last stats
# publication) is fresh; 503 with an OpenAI-style error and Retry-After
# when the engine is stopped (SIGSTOP: attached, but its loop does not
# run) past the bound, when it is gone (detached), and before it is back;
# 200 again once it runs or has been re-attached, and then a completion
# works.  Only GET and HEAD are allowed; a bad bound fails the
# configuration.

use strict;
use warnings;

use lib 't/lib';
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $t = PagedLLM::Test->new(
    server => "        location = /health { pagedllm_health 1s; }\n"
            . "        location = /health/default { pagedllm_health; }\n",
)->start;

# Polls GET $path until its status is $want or $timeout seconds pass.
sub wait_health {
    my ($want, $timeout, $path) = @_;
    my $deadline = time + $timeout;
    my $r;
    while (1) {
        $r = $t->request(GET => $path // '/health');
        return $r if $r->{status} == $want || time > $deadline;
        sleep 0.05;
    }
}

sub unavailable {
    my ($name, $r, $why) = @_;
    is($r->{status}, 503, "$name: 503");
    is($r->{json}{error}{code}, 'engine_unavailable',
       "$name: an OpenAI-style error, code engine_unavailable");
    like($r->{json}{error}{message} // '', $why, "$name: the message says why");
    ok(defined $r->{headers}{'retry-after'}, "$name: Retry-After");
}

my $r = wait_health(200, 10);
is($r->{status}, 200, 'attached, engine running: 200');
is($r->{body}, '', 'attached: an empty body');
is($t->request(HEAD => '/health')->{status}, 200, 'HEAD: 200');
is($t->request(GET => '/health/default')->{status}, 200,
   'the default bound: 200');
is($t->request(POST => '/health', '{}')->{status}, 405, 'POST: 405');

# stopped: still attached, but no heartbeat
my $pid = $t->{pids}{engine};
kill 'STOP', $pid;
my $stopped = time;
$r = wait_health(503, 10);
my $after = time - $stopped;
kill 'CONT', $pid;
unavailable('engine stopped', $r, qr/has not run its loop for \d+ ms/);
my ($age) = ($r->{json}{error}{message} // '') =~ /for (\d+) ms/;
ok(($age // 0) > 1000, "stopped: the heartbeat's age is past the bound "
                       . '(' . ($age // '?') . ' ms)');
# the last heartbeat came at most 200 ms (the engine's idle wait) before
# the stop
ok($after >= 0.8 - 0.05, sprintf('stopped: 503 no earlier than the bound '
                                 . 'allows (%.2f s)', $after));
is(wait_health(200, 10)->{status}, 200, 'engine continued: 200 again');

# gone: the worker detaches at the socket's EOF
$t->stop_engine;
$r = wait_health(503, 10);
unavailable('engine gone', $r, qr/not attached/);
sleep 0.5;
unavailable('engine still gone', $t->request(GET => '/health'),
            qr/not attached/);

# back: 200 once re-attached, and the engine serves
$t->start_engine;
is(wait_health(200, 15)->{status}, 200, 'engine back: 200 after re-attach');
$r = $t->completion(prompt => 'Hello', max_tokens => 3);
is($r->{status}, 200, 'engine back: a completion right after is served');

$t->finish;

# a bound that is not a time fails the configuration
my $bad = PagedLLM::Test->new(
    server => "        location = /health { pagedllm_health soon; }\n");
$bad->write_conf;
my $out = $bad->nginx_test_config("-p $bad->{dir}/ -c $bad->{dir}/nginx.conf");
isnt($?, 0, 'pagedllm_health soon: nginx -t fails');
like($out, qr/invalid max age "soon"/, 'pagedllm_health soon: says why');

done_testing;
