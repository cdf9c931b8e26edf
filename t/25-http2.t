#!/usr/bin/perl
# The API over HTTP/2 cleartext (listen ... http2, curl with prior
# knowledge): completions streamed and not, SSE events that arrive while
# the generation still runs, [DONE] last, a request body larger than
# HTTP/2's initial flow-control window, and a client that is killed
# mid-stream: its generation is aborted and its KV blocks freed.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Curl;
use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $h2 = PagedLLM::Test::free_port();
my $t = PagedLLM::Test->new(http => <<"EOF")->start;
    server {
        listen 127.0.0.1:$h2 http2;

        location /v1/ {
            pagedllm;
        }
    }
EOF
my $base = "http://127.0.0.1:$h2";
my $dir = $t->dir;

# curl with HTTP/2 prior knowledge; the response head into h2.head
sub curl_start {
    return PagedLLM::Curl->start("$dir/h2.head", '--http2-prior-knowledge',
                                 @_);
}

# non-streaming
my $c = curl_start("$base/v1/completions", '-H', 'Content-Type: application/json',
                   '-d', $J->encode({ prompt => 'Hello over h2', max_tokens => 8,
                                      temperature => 0,
                                      ignore_eos => JSON::PP::true }));
$c->events(0, time + 30);
is($c->finish, 0, 'h2 completion: curl succeeds');
is($c->head, 'HTTP/2 200', 'h2 completion: HTTP/2 200');
my $body = eval { $J->decode($c->{buf}) } // {};
is($body->{usage}{completion_tokens}, 8, 'h2 completion: 8 tokens');
my $h1 = $t->completion(prompt => 'Hello over h2', max_tokens => 8,
                        temperature => 0, ignore_eos => JSON::PP::true);
is($body->{choices}[0]{text}, $h1->{json}{choices}[0]{text},
   'h2 completion: the same text as over HTTP/1.1');

# streaming, to the end
$c = curl_start("$base/v1/completions", '-d',
                $J->encode({ prompt => 'Hello over h2', max_tokens => 8,
                             temperature => 0, stream => JSON::PP::true,
                             ignore_eos => JSON::PP::true }));
my $ev = $c->events(0, time + 30);
is($c->finish, 0, 'h2 stream: curl succeeds');
is($c->head, 'HTTP/2 200', 'h2 stream: HTTP/2 200');
like($c->{headers}{'content-type'}, qr{^text/event-stream},
     'h2 stream: SSE');
is(scalar @$ev, 9, 'h2 stream: 8 token events and [DONE]');
is($ev->[-1], '[DONE]', 'h2 stream: [DONE] last');
my @text = map { (eval { $J->decode($_) } // {})->{choices}[0]{text} // '' }
           @$ev[0 .. $#$ev - 1];
is(join('', @text), $h1->{json}{choices}[0]{text},
   'h2 stream: the events spell the same text');
is($c->{buf} =~ s/^(data: [^\n]*\n\n)+//r, '', 'h2 stream: nothing but events');

# a body of 200 KB (JSON padded with spaces), past the 64 KB window
my $big = '{"prompt":"Hello over h2","max_tokens":3,"ignore_eos":true'
          . (' ' x 200_000) . '}';
open my $bf, '>', "$dir/big.json" or die;
print $bf $big;
close $bf;
$c = curl_start("$base/v1/completions", '--data-binary', "\@$dir/big.json");
$c->events(0, time + 30);
is($c->finish, 0, 'h2 200 KB body: curl succeeds');
is($c->head, 'HTTP/2 200', 'h2 200 KB body: 200');
is((eval { $J->decode($c->{buf}) } // {})->{usage}{completion_tokens}, 3,
   'h2 200 KB body: served');

# events arrive while the generation runs; killing curl aborts it
PagedLLM::Curl::killed_stream_ok($t, 'h2', \&curl_start,
                                 "$base/v1/completions");

$t->finish;
done_testing;
