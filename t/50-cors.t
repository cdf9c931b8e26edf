#!/usr/bin/perl
# pagedllm_cors: a browser's preflight is answered 204 for an allowed
# origin and 403 for another; every answer to an allowed origin (JSON, an
# SSE stream, an error) carries Access-Control-Allow-Origin, and nothing
# changes where the directive is off.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $APP = 'https://app.example';
my $t = PagedLLM::Test->new(server => "
        pagedllm_cors $APP http://localhost:3000;

        location /open/ {
            pagedllm;
            pagedllm_cors on;
        }

        location /closed/ {
            pagedllm;
            pagedllm_cors off;
        }
")->start;

sub preflight {
    my ($path, $origin, %h) = @_;
    return $t->request(OPTIONS => $path, undef, Origin => $origin,
                       'Access-Control-Request-Method' => 'POST', %h);
}

my $r = preflight('/v1/chat/completions', $APP,
                  'Access-Control-Request-Headers' => 'content-type, x-trace');
is($r->{status}, 204, 'preflight from a listed origin: 204');
my $h = $r->{headers};
is($h->{'access-control-allow-origin'}, $APP,
   'preflight: Allow-Origin is the request\'s origin');
is($h->{'access-control-allow-methods'}, 'GET, POST, OPTIONS',
   'preflight: Allow-Methods');
is($h->{'access-control-allow-headers'}, 'content-type, x-trace',
   'preflight: Allow-Headers grants the headers asked for');
like($h->{'access-control-max-age'} // '', qr/^\d+$/,
     'preflight: Max-Age is a number of seconds');
is($h->{vary}, 'Origin', 'preflight: Vary: Origin');
is($r->{body}, '', 'preflight: no body');

$r = preflight('/v1/completions', 'http://localhost:3000');
is($r->{status}, 204, 'preflight from the second listed origin: 204');
is($r->{headers}{'access-control-allow-origin'}, 'http://localhost:3000',
   'second origin: its own origin echoed');
is($r->{headers}{'access-control-allow-headers'},
   'Authorization, Content-Type',
   'preflight without Request-Headers: Authorization, Content-Type');

$r = preflight('/v1/completions', 'https://evil.example');
is($r->{status}, 403, 'preflight from an origin not listed: 403');
is($r->{json}{error}{code}, 'origin_not_allowed',
   'refused preflight: OpenAI-style error, code origin_not_allowed');
ok(!grep(/^access-control-/, keys %{ $r->{headers} }),
   'refused preflight: no CORS header');

$r = preflight('/open/v1/completions', 'https://anyone.example');
is($r->{status}, 204, 'pagedllm_cors on: preflight from any origin: 204');
is($r->{headers}{'access-control-allow-origin'}, 'https://anyone.example',
   'pagedllm_cors on: that origin echoed');

$r = preflight('/closed/v1/completions', $APP);
is($r->{status}, 405, 'pagedllm_cors off: a preflight is a 405 as any OPTIONS');
ok(!grep(/^access-control-|^vary$/, keys %{ $r->{headers} }),
   'pagedllm_cors off: no CORS header, no Vary');

$r = $t->request(OPTIONS => '/v1/completions', undef, Origin => $APP);
is($r->{status}, 405,
   'OPTIONS without Access-Control-Request-Method is no preflight: 405');
is($r->{headers}{'access-control-allow-origin'}, $APP,
   'that 405 carries Allow-Origin for an allowed origin');

$r = $t->request(GET => '/v1/models', undef, Origin => $APP);
is($r->{status}, 200, 'GET /v1/models with an Origin: 200');
is($r->{headers}{'access-control-allow-origin'}, $APP,
   'models: Allow-Origin');
like($r->{headers}{'access-control-expose-headers'} // '', qr/Retry-After/,
     'models: Retry-After exposed to scripts');
like($r->{headers}{'access-control-expose-headers'} // '', qr/X-Request-Id/,
     'models: X-Request-Id exposed to scripts');

$r = $t->request(GET => '/v1/models');
is($r->{status}, 200, 'GET /v1/models without Origin: 200');
ok(!exists $r->{headers}{'access-control-allow-origin'},
   'without Origin: no Allow-Origin');
is($r->{headers}{vary}, 'Origin', 'without Origin: still Vary: Origin');

my $body = $J->encode({ prompt => 'Hello', max_tokens => 6,
                        stream => JSON::PP::true });
$r = $t->request(POST => '/v1/completions', $body, Origin => $APP);
is($r->{status}, 200, 'streamed completion with an Origin: 200');
is($r->{headers}{'transfer-encoding'}, 'chunked', 'stream: chunked');
like($r->{headers}{'content-type'}, qr{^text/event-stream},
     'stream: an SSE stream');
is($r->{headers}{'access-control-allow-origin'}, $APP,
   'stream: Allow-Origin on the SSE response');
ok(!$r->{framing_error}, 'stream: chunked framing intact')
    or diag($r->{framing_error});
like($r->{body}, qr/data: \[DONE\]\n\n\z/, 'stream: ends with [DONE]');

$r = $t->request(POST => '/v1/chat/completions',
                 $J->encode({ prompt => 'x', max_tokens => 3,
                              messages => 'not a list' }),
                 Origin => $APP);
is($r->{status}, 400, 'bad chat request with an Origin: 400');
is($r->{headers}{'access-control-allow-origin'}, $APP,
   'the 400 carries Allow-Origin, so the page can read the error');
ok($r->{json}{error}{message}, 'the 400 is an OpenAI-style error');

$r = $t->request(POST => '/v1/completions', '{"prompt": 5}',
                 Origin => 'https://evil.example');
is($r->{status}, 400, 'bad request from an origin not allowed: 400');
ok(!exists $r->{headers}{'access-control-allow-origin'},
   'from an origin not allowed: no Allow-Origin');

$r = $t->request(GET => '/v1/nowhere', undef, Origin => $APP);
is($r->{status}, 404, 'unknown path with an Origin: 404');
is($r->{headers}{'access-control-allow-origin'}, $APP,
   'the 404 carries Allow-Origin');

$r = $t->completion(prompt => 'Hello', max_tokens => 2);
is($r->{status}, 200, 'a completion without Origin still works');

# with the engine gone, the 503 and its Retry-After reach the page too
$t->stop_engine;
$r = $t->request(GET => '/v1/models', undef, Origin => $APP);
is($r->{status}, 503, 'engine stopped: GET /v1/models with an Origin: 503');
is($r->{headers}{'access-control-allow-origin'}, $APP,
   'the 503 carries Allow-Origin');
ok(defined $r->{headers}{'retry-after'}
   && ($r->{headers}{'access-control-expose-headers'} // '') =~ /Retry-After/,
   'the 503\'s Retry-After is exposed to scripts');

# an origin that no browser sends is refused at configuration time
for my $bad ('https://app.example/', 'app.example', 'https://') {
    my $c = PagedLLM::Test->new(server => "pagedllm_cors $bad;");
    $c->write_conf;
    my $d = $c->dir;
    my $out = $c->nginx_test_config("-p $d/ -c $d/nginx.conf -e $d/error.log");
    isnt($?, 0, "pagedllm_cors $bad: nginx -t fails");
    like($out, qr/invalid origin/, "pagedllm_cors $bad: says invalid origin");
}

$t->finish;
done_testing();
