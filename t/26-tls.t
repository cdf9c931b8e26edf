#!/usr/bin/perl
# The API over TLS (a self-signed certificate made with openssl at test
# time, verified by curl): HTTP/2 through ALPN and HTTP/1.1, completions
# streamed and not, SSE events that arrive while the generation still
# runs, [DONE] last, and a client killed mid-stream over TLS + HTTP/2:
# its generation is aborted and its KV blocks freed.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Curl;
use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $tls = PagedLLM::Test::free_port();
my $probe = PagedLLM::Test->new;
my $dir = $probe->dir;

# a self-signed certificate for 127.0.0.1, and another one nobody uses
for my $name ('', 'other-') {
    system("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
           . " -nodes -days 2 -subj /CN=127.0.0.1"
           . " -addext subjectAltName=IP:127.0.0.1"
           . " -keyout $dir/${name}key.pem -out $dir/${name}cert.pem"
           . " 2>/dev/null") == 0
        or die "openssl could not make a certificate\n";
}

my $t = PagedLLM::Test->new(http => <<"EOF")->start;
    server {
        listen 127.0.0.1:$tls ssl http2;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;

        location /v1/ {
            pagedllm;
        }
    }
EOF
my $base = "https://127.0.0.1:$tls";

# curl trusting our certificate; the response head into tls.head
sub curl_start {
    return PagedLLM::Curl->start("$dir/tls.head", '--cacert',
                                 "$dir/cert.pem", @_);
}

sub curl_run {
    return PagedLLM::Curl->run("$dir/tls.head", '--cacert', "$dir/cert.pem",
                               @_);
}

my %greedy = (prompt => 'Hello over TLS', max_tokens => 8, temperature => 0,
              ignore_eos => JSON::PP::true);
my $h1 = $t->completion(%greedy);
is($h1->{status}, 200, 'plain HTTP/1.1 reference completion');
my $text = $h1->{json}{choices}[0]{text};

# the certificate is checked: trusting another one, curl refuses (60)
system("curl -s --cacert $dir/other-cert.pem $base/v1/models"
       . " >/dev/null 2>&1");
is($? >> 8, 60, 'TLS: curl verifies the certificate');
my $c;

for my $proto (['--http2', 'HTTP/2 200'], ['--http1.1', 'HTTP/1.1 200 OK']) {
    my ($flag, $line) = @$proto;

    $c = curl_run($flag, "$base/v1/completions", '-d', $J->encode(\%greedy));
    is($c->{rc}, 0, "TLS $flag completion: curl succeeds");
    is($c->{head}, $line, "TLS $flag completion: $line");
    is((eval { $J->decode($c->{buf}) } // {})->{choices}[0]{text}, $text,
       "TLS $flag completion: the same text as plain HTTP/1.1");

    $c = curl_run($flag, "$base/v1/completions", '-d',
                  $J->encode({ %greedy, stream => JSON::PP::true }));
    my $ev = $c->{events};
    is($c->{rc}, 0, "TLS $flag stream: curl succeeds");
    is($c->{head}, $line, "TLS $flag stream: $line");
    like($c->{headers}{'content-type'}, qr{^text/event-stream},
         "TLS $flag stream: SSE");
    is(scalar @$ev, 9, "TLS $flag stream: 8 token events and [DONE]");
    is($ev->[-1], '[DONE]', "TLS $flag stream: [DONE] last");
    is(join('', map { (eval { $J->decode($_) } // {})->{choices}[0]{text}
                      // '' } @$ev[0 .. $#$ev - 1]),
       $text, "TLS $flag stream: the events spell the same text");
    is($c->{buf} =~ s/^(data: [^\n]*\n\n)+//r, '',
       "TLS $flag stream: nothing but events");
}

# events arrive while the generation runs; killing curl aborts it
PagedLLM::Curl::killed_stream_ok($t, 'TLS', sub { curl_start('--http2', @_) },
                                 "$base/v1/completions");

$t->finish;
$probe->finish;
done_testing;
