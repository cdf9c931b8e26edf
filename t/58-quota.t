#!/usr/bin/perl
# pagedllm_limit_tokens: token buckets per key in a zone shared by every
# worker (two workers, connections pinned to each by reuseport and $pid).
# Prompt tokens are taken at admission, completion tokens (every choice's)
# when the request ends; a stream that crosses its quota runs to its end
# and the key's next request gets a 429 with the Retry-After the debt
# needs; keys are independent, an empty key is not counted, a prompt above
# the burst can never pass, a refilled bucket admits again, a client that
# goes away is charged what was generated, and with two quotas in one
# place both must admit (a refusal by one gives the other its tokens back).

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;

# slow: 1 token a minute, so nothing refills during the test; fast: 10
# tokens a second
my $t = PagedLLM::Test->new(
    workers => 2,
    listen => 'reuseport',
    server => <<'EOF',
        pagedllm_limit_tokens zone=slow:1m key=$http_x_key rate=1/m
                              burst=60;

        location /fast/ {
            pagedllm;
            pagedllm_limit_tokens zone=fast:64k key=$http_x_key rate=10/s
                                  burst=20;
        }

        location /two/ {
            pagedllm;
            pagedllm_limit_tokens zone=per:64k key=$http_x_key rate=1/m
                                  burst=20;
            pagedllm_limit_tokens zone=all:64k key=all rate=1/m burst=30;
        }

        location /one/ {
            pagedllm;
            pagedllm_limit_tokens zone=per:64k key=$http_x_key rate=1/m
                                  burst=20;
        }

        location = /pid {
            return 200 $pid;
        }
EOF
);
$t->start;

# ---- connections kept alive, each served by one worker -----------------

sub ka_request {
    my ($c, $method, $path, $body, %h) = @_;
    PagedLLM::Test::syswrite_all($c->{sock},
        $t->raw_request($method, $path, $body, Connection => 'keep-alive',
                        %h));
    my $buf = '';
    my $deadline = time + 30;
    my $r = PagedLLM::Test::read_head($c->{sock}, \$buf, $deadline)
        or die "no response head\n";
    my $len = $r->{headers}{'content-length'} // 0;
    while (length $buf < $len) {
        PagedLLM::Test::fill($c->{sock}, \$buf, $deadline) > 0
            or die "response body cut\n";
    }
    $r->{body} = $buf;
    $r->{json} = eval { $J->decode($buf) }
        if ($r->{headers}{'content-type'} // '') =~ m{application/json};
    return $r;
}

# one connection to each of two workers
my %by_pid;
for (1 .. 64) {
    my $c = { sock => $t->connect };
    my $pid = ka_request($c, GET => '/pid')->{body};
    $by_pid{$pid} //= $c;
    last if keys %by_pid == 2;
}
my @w = map { $by_pid{$_} } sort keys %by_pid;
is(scalar @w, 2, 'two connections, each served by a different worker');

sub prompt { [ (5) x $_[0] ] }

sub complete {
    my ($c, $key, $n_prompt, %req) = @_;
    return ka_request($c, POST => '/v1/completions',
                      $J->encode({ prompt => prompt($n_prompt),
                                   ignore_eos => JSON::PP::true,
                                   max_tokens => 1, %req }),
                      $key ? ('X-Key' => $key) : ());
}

sub refused_ok {
    my ($r, $name) = @_;
    is($r->{status}, 429, "$name: 429");
    is($r->{json}{error}{code}, 'rate_limit_exceeded',
       "$name: code rate_limit_exceeded");
    is($r->{json}{error}{type}, 'tokens', "$name: type tokens");
}

# ---- admission across workers, two keys ---------------------------------

my $r = complete($w[0], 'alice', 10, max_tokens => 5);
is($r->{status}, 200, 'alice: 10 prompt + 5 completion tokens admitted');
is($r->{json}{usage}{total_tokens}, 15, 'alice: 15 tokens in usage');

$r = complete($w[1], 'alice', 46);
refused_ok($r, 'alice on the other worker, 46 tokens with 45 left');
ok($r->{headers}{'retry-after'} >= 50 && $r->{headers}{'retry-after'} <= 60,
   'alice: Retry-After is the minute one token takes to refill')
    or diag("Retry-After $r->{headers}{'retry-after'}");
like($r->{json}{error}{message}, qr/46 prompt tokens/,
     'alice: the message names the prompt tokens');

$r = complete($w[0], 'bob', 50, max_tokens => 3);
is($r->{status}, 200, 'bob has his own bucket: 50 tokens admitted');

$r = complete($w[1], 'alice', 45);
is($r->{status}, 200, 'alice on the other worker: exactly the 45 left');

$r = complete($w[0], 'alice', 1);
refused_ok($r, 'alice in debt (one completion token)');
ok($r->{headers}{'retry-after'} >= 110 && $r->{headers}{'retry-after'} <= 120,
   'alice: Retry-After covers the debt and the prompt (2 tokens, 2 min)')
    or diag("Retry-After $r->{headers}{'retry-after'}");

$r = complete($w[1], 'bob', 7);
is($r->{status}, 200, 'bob: the 7 left of his 60 admitted');
$r = complete($w[0], 'bob', 1);
refused_ok($r, 'bob: his bucket is spent, on either worker');

$r = complete($w[0], '', 100);
is($r->{status}, 200, 'no key: not counted (100 tokens above the burst)');

$r = complete($w[0], 'carol', 61);
refused_ok($r, 'carol: a prompt above the burst');
ok(!exists $r->{headers}{'retry-after'},
   'carol: no Retry-After for a request that can never pass');
like($r->{json}{error}{message}, qr/too large/i, 'carol: said to be too large');
$r = complete($w[1], 'carol', 60);
is($r->{status}, 200, 'carol: the refusal took nothing, the burst passes');

# ---- n > 1: every choice's tokens ----------------------------------------

$r = complete($w[0], 'dave', 5, n => 2, max_tokens => 10,
              temperature => 1);
is($r->{json}{usage}{completion_tokens}, 20, 'dave: two choices of 10');
$r = complete($w[1], 'dave', 36);
refused_ok($r, 'dave: 5 + 2 x 10 taken, 36 of the 35 left');
$r = complete($w[0], 'dave', 35);
is($r->{status}, 200, 'dave: 35 left, admitted');

# ---- a stream crossing the quota ends normally; the next is refused -----

my $s = $t->request(POST => '/v1/completions', $J->encode({
        prompt => prompt(10), max_tokens => 80, ignore_eos => JSON::PP::true,
        stream => JSON::PP::true, stream_options => { include_usage =>
        JSON::PP::true } }), 'X-Key' => 'erin');
is($s->{status}, 200, 'erin: a stream of 10 + 80 tokens in a bucket of 60');
my @data = $s->{body} =~ /^data: (.*)$/mg;
is($data[-1], '[DONE]', 'erin: the stream ran to [DONE]');
my ($usage) = map { $_->{usage} } grep { $_->{usage} }
              map { $J->decode($_) } grep { $_ ne '[DONE]' } @data;
is($usage->{completion_tokens}, 80, 'erin: all 80 tokens were generated');
ok(!grep(/"error"/, @data), 'erin: no error event in the stream');

for my $c (@w) {
    $r = complete($c, 'erin', 1);
    refused_ok($r, 'erin: the next request, on either worker');
    # 30 tokens of debt and 1 of prompt, one a minute
    ok($r->{headers}{'retry-after'} >= 1850
       && $r->{headers}{'retry-after'} <= 1860,
       'erin: Retry-After is the 31 minutes the debt and prompt need')
        or diag("Retry-After $r->{headers}{'retry-after'}");
}

# ---- refill --------------------------------------------------------------

$r = ka_request($w[0], POST => '/fast/v1/completions',
                $J->encode({ prompt => prompt(15), max_tokens => 5,
                             ignore_eos => JSON::PP::true }),
                'X-Key' => 'frank');
is($r->{status}, 200, 'frank: 20 tokens of a 20-token burst');
$r = ka_request($w[1], POST => '/fast/v1/completions',
                $J->encode({ prompt => prompt(10), max_tokens => 1 }),
                'X-Key' => 'frank');
refused_ok($r, 'frank: 10 more at once');
is($r->{headers}{'retry-after'}, 1, 'frank: 10 tokens at 10/s refill in 1 s');
sleep $r->{headers}{'retry-after'} + 0.1;
$r = ka_request($w[1], POST => '/fast/v1/completions',
                $J->encode({ prompt => prompt(10), max_tokens => 1 }),
                'X-Key' => 'frank');
is($r->{status}, 200, 'frank: admitted after Retry-After');

# ---- a client that goes away pays for what was generated ----------------

my $st = $t->send_request(POST => '/v1/completions', $J->encode({
    prompt => prompt(10), max_tokens => 1000, ignore_eos => JSON::PP::true,
    stream => JSON::PP::true }), 'X-Key' => 'gina');
my $buf = '';
my $head = PagedLLM::Test::read_head($st, \$buf, time + 30);
is($head->{status}, 200, 'gina: a long stream admitted');
my $c = PagedLLM::Test::read_chunks([{ sock => $st, buf => $buf }],
                                    time + 30, 12)->[0];
ok(@{ $c->{chunks} } >= 12, 'gina: 12 chunks read');
close $st;
sleep 0.5;
$r = complete($w[0], 'gina', 40);
refused_ok($r, 'gina: gone after 11 tokens or more, 40 is refused');

# ---- two quotas in one place ---------------------------------------------

sub complete_at {
    my ($c, $path, $key, $n_prompt) = @_;
    return ka_request($c, POST => "$path/v1/completions",
                      $J->encode({ prompt => prompt($n_prompt),
                                   max_tokens => 1,
                                   ignore_eos => JSON::PP::true }),
                      'X-Key' => $key);
}

$r = complete_at($w[0], '/two', 'hank', 14);
is($r->{status}, 200, 'hank: 15 tokens from his bucket and the shared one');
$r = complete_at($w[1], '/two', 'ivy', 16);
refused_ok($r, 'ivy: her bucket holds 16, the shared one 15');
$r = complete_at($w[0], '/one', 'ivy', 20);
is($r->{status}, 200,
   'ivy: the refusal gave her own bucket its 16 back (20 pass elsewhere)');
$r = complete_at($w[1], '/two', 'hank', 5);
is($r->{status}, 200, 'hank: 5 more, in both buckets');
$r = complete_at($w[0], '/one', 'hank', 1);
refused_ok($r, 'hank: his bucket, shared with /one, is spent');

# ---- configuration -------------------------------------------------------

sub conf_error {
    my ($directive) = @_;
    my $d = $t->dir;
    open my $fh, '>', "$d/bad.conf" or die;
    print $fh "load_module $t->{build}/ngx_http_pagedllm_module.so;\n"
            . "error_log $d/bad.log;\npid $d/bad.pid;\n"
            . "events {}\nhttp {\n$directive\n}\n";
    close $fh;
    return $t->nginx_test_config("-p $d/ -c $d/bad.conf -e $d/bad.log");
}

like(conf_error('pagedllm_limit_tokens zone=z:1m key=$x rate=10/h;'),
     qr/invalid rate "rate=10\/h"/, 'a rate per hour is refused');
like(conf_error('pagedllm_limit_tokens zone=z:1m rate=10/m burst=5;'),
     qr/needs zone=NAME:SIZE, key=\$VARIABLE and rate=N\/m/,
     'a quota without a key is refused');
like(conf_error("pagedllm_limit_tokens zone=z:1m key=\$x rate=10/m;\n"
                . "server { pagedllm_limit_tokens zone=z:1m key=\$x "
                . "rate=20/m; }"),
     qr/zone "z" is declared with another key, rate or burst/,
     'a zone named again with another rate is refused');
like(conf_error('pagedllm_limit_tokens zone=z:1k key=$x rate=10/m;'),
     qr/zone "z" is too small/, 'a zone below 32k is refused');
like(conf_error("pagedllm_limit_tokens zone=z:1m key=\$x rate=10/m;\n"
                . "pagedllm_limit_tokens zone=z:1m key=\$x rate=10/m;"),
     qr/is duplicate/, 'the same zone twice in one place is refused');

$t->finish;
done_testing;
