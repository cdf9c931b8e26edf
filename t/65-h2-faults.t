#!/usr/bin/perl
# HTTP/2 and TLS faults, driven by node's http2 and tls modules
# (t/node/h2-faults.mjs): a stream reset (RST_STREAM) mid-generation on a
# connection that stays open aborts that request alone and frees its KV
# blocks while its neighbours on the connection finish; 200 concurrent
# streams on one connection all finish; and TLS clients that drop their
# connections mid-handshake, 400 of them, while streams run over TLS cost
# those streams nothing and leave nginx serving.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $h2 = PagedLLM::Test::free_port();
my $tls = PagedLLM::Test::free_port();
my $probe = PagedLLM::Test->new;
my $dir = $probe->dir;

system("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
       . " -nodes -days 2 -subj /CN=127.0.0.1"
       . " -addext subjectAltName=IP:127.0.0.1"
       . " -keyout $dir/key.pem -out $dir/cert.pem 2>/dev/null") == 0
    or die "openssl could not make a certificate\n";

my $t = PagedLLM::Test->new(http => <<"EOF")->start;
    server {
        listen 127.0.0.1:$h2 http2;
        http2_max_concurrent_streams 256;

        location /v1/ {
            pagedllm;
        }

        location = /pagedllm/status {
            pagedllm_status;
        }
    }

    server {
        listen 127.0.0.1:$tls ssl http2;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;

        location /v1/ {
            pagedllm;
        }

        location = /pagedllm/status {
            pagedllm_status;
        }
    }
EOF

sub node {
    my $out = `node t/node/h2-faults.mjs @_ 2>&1`;
    my $r = eval { $J->decode($out) };
    ok($r, "node h2-faults.mjs $_[0] reports") or diag($out);
    return $r // {};
}

# a stream reset mid-generation
my $r = node('reset', "http://127.0.0.1:$h2");
is($r->{a}{status}, 200, 'reset: the stream had begun');
ok(!$r->{a}{done} && $r->{a}{events} >= 5 && $r->{a}{events} < 1500,
   "reset: the reset stream stopped ($r->{a}{events} events)");
for my $n (qw(b c)) {
    ok($r->{$n}{done} && $r->{$n}{events} == 300,
       "reset: neighbour $n on the connection got all 300 tokens");
}
ok($r->{d}{done} && $r->{d}{events} == 8,
   'reset: a new stream on the same connection is served');
ok(!$r->{goaway} && !$r->{closed}, 'reset: the connection stayed open');
is($r->{after}{kv_blocks}{used}, 0, 'reset: no KV block held after');
my $gen = $r->{after}{generation_tokens_total}
        - $r->{before}{generation_tokens_total};
cmp_ok($gen, '<', 1500 + 300 + 300,
       "reset: the reset request was aborted, not run out ($gen tokens)");

# 200 concurrent streams on one connection
$r = node('many', "http://127.0.0.1:$h2", 200);
is($r->{ok}, 200, '200 streams on one connection: all 16 tokens and [DONE]')
    or diag($J->encode($r->{bad} // []));
is($r->{after}{kv_blocks}{used}, 0, '200 streams: no KV block held after');

# handshakes cut under load
$r = node('handshakes', "https://127.0.0.1:$tls", "$dir/cert.pem", 400, 20);
cmp_ok($r->{running_through}, '>', 0,
       "TLS: streams ran through all the cuts ($r->{running_through} of 20)");
is($r->{ok}, 20, 'TLS: the 20 streams running through the cuts finish');
cmp_ok($r->{midway}, '>', 0,
       "TLS: clients cut mid-handshake ($r->{midway} of 400)");
ok($r->{late}{done} && $r->{late}{events} == 8,
   'TLS: a new connection is served after the cuts');
is($r->{after}{kv_blocks}{used}, 0, 'TLS: no KV block held after');

$t->finish;
done_testing;
