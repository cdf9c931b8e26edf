#!/usr/bin/perl
# nginx's own errors as OpenAI-shaped JSON (issue 24 item 5): with the
# documented error_page to a pagedllm_error location, a body over
# client_max_body_size (by Content-Length, or chunked), a path no location
# serves, a method nginx refuses and a limit_req refusal answer
# {"error": {message, type, param, code}} with application/json and the
# original status; without the error_page nginx's HTML stays.

use strict;
use warnings;

use lib 't/lib';
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Test;

my $ERRORS = 'error_page 400 401 403 404 405 408 413 414 429 500 502 503 504
                   @pagedllm_error;';

my $t = PagedLLM::Test->new(
    http   => 'limit_req_zone $binary_remote_addr zone=one:1m rate=1r/m;',
    server => <<"EOF_CONF")->start;
        client_max_body_size 1k;
        $ERRORS

        location \@pagedllm_error {
            pagedllm_error;
        }

        location /limited/ {
            limit_req zone=one nodelay;
            limit_req_status 429;
            pagedllm;
        }
EOF_CONF

sub openai_error {
    my ($r, $status, $code, $name) = @_;
    my $e = $r->{json} && $r->{json}{error};
    ok($r->{status} == $status
       && ($r->{headers}{'content-type'} // '') =~ m{^application/json}
       && ref $e eq 'HASH' && ($e->{code} // '') eq $code
       && length($e->{message} // '') && exists $e->{param}
       && $e->{type} eq ($status < 500 ? 'invalid_request_error'
                                       : 'server_error'),
       "$name: $status JSON error, code $code")
        or diag("status $r->{status}: $r->{body}");
    return $e ? $e->{message} : '';
}

my $big = '{"prompt":"' . ('x' x 2000) . '","max_tokens":1}';

my $m = openai_error($t->request(POST => '/v1/completions', $big), 413,
                     'request_too_large',
                     'a Content-Length over client_max_body_size');
like($m, qr/client_max_body_size/, '413: the message names the limit');

# a chunked body: the limit is found while nginx reads it
{
    my $s = $t->connect;
    my $body = sprintf("%x\r\n%s\r\n0\r\n\r\n", length $big, $big);
    PagedLLM::Test::syswrite_all($s,
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        . "Connection: close\r\nContent-Type: application/json\r\n"
        . "Transfer-Encoding: chunked\r\n\r\n$body");
    my $buf = '';
    my $r = PagedLLM::Test::read_head($s, \$buf, time + 30)
        // { status => 0, headers => {} };
    my $len = $r->{headers}{'content-length'} // 0;
    while (length $buf < $len) {
        last if PagedLLM::Test::fill($s, \$buf, time + 10) <= 0;
    }
    $r->{body} = $buf;
    $r->{json} = eval { $PagedLLM::Test::JSON->decode($buf) };
    openai_error($r, 413, 'request_too_large',
                 'a chunked body over client_max_body_size');
}

my $small = $t->request(POST => '/v1/completions',
                        '{"prompt":"Hi","max_tokens":1}');
is($small->{status}, 200, 'a body under the limit is served');

$m = openai_error($t->request(POST => '/v2/completions', '{}'), 404,
                  'unknown_url', 'a path outside every location');
like($m, qr{POST /v2/completions}, '404: the message names method and URL');

openai_error($t->request(GET => '/nothing/here?x=1'), 404, 'unknown_url',
             'a GET outside every location');

my $head = $t->request(HEAD => '/v2/models');
ok($head->{status} == 404 && $head->{body} eq ''
   && ($head->{headers}{'content-type'} // '') =~ m{application/json},
   'HEAD: the 404 head alone, as JSON');

# nginx refuses TRACE itself (405) before any location's handler
openai_error($t->request(TRACE => '/v1/models'), 405, 'method_not_allowed',
             'TRACE refused by nginx');

my $first = $t->request(POST => '/limited/v1/completions',
                        '{"prompt":"Hi","max_tokens":1}');
is($first->{status}, 200, 'limit_req: the first request passes');
openai_error($t->request(POST => '/limited/v1/completions',
                         '{"prompt":"Hi","max_tokens":1}'),
             429, 'rate_limit_exceeded', 'limit_req over its rate');

# the API's own errors are unchanged by the error_page
my $own = $t->request(POST => '/v1/nothing', '{}');
openai_error($own, 404, 'not_found', "the module's own 404");

$t->finish;

# without error_page nginx answers its HTML page: the configuration is
# what makes these JSON
my $plain = PagedLLM::Test->new(server => 'client_max_body_size 1k;')->start;
my $r = $plain->request(POST => '/v1/completions', $big);
ok($r->{status} == 413
   && ($r->{headers}{'content-type'} // '') =~ m{^text/html},
   'without error_page: nginx\'s HTML 413');
$plain->finish;

done_testing();
