#!/usr/bin/perl
# pagedllm_route_only and pagedllm_prefix_hash_tokens without any engine:
# nginx -t refuses a folder with no tokenizer, a bad parameter, a second
# route_only, route_only next to pagedllm_engine and a K out of range, and
# takes a folder relative to the configuration's; a
# route-only nginx proxying to itself logs $pagedllm_prefix_hash: the
# first K ids decide it (K per location), a request naming another model
# than model=NAME or refused by the parser has none, nor has a request
# whose body is not read (the variable read in a rewrite), nor a GET.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Deploy;

my $J = $PagedLLM::Test::JSON;

sub conf_error {
    my ($http) = @_;
    my ($rc, $out) = PagedLLM::Deploy->with_http($http)->check_conf;
    return $rc ? $out : '';
}

like(conf_error("pagedllm_route_only /nonexistent/model;\n"),
     qr{cannot load tokenizer "/nonexistent/model/tokenizer\.json"},
     'nginx -t: a folder with no tokenizer.json is refused by name');
like(conf_error("pagedllm_route_only \@MODEL_DIR\@ name=x;\n"),
     qr/invalid parameter "name=x"/, 'nginx -t: an unknown parameter');
like(conf_error("pagedllm_route_only \@MODEL_DIR\@;\n"
                . "pagedllm_route_only \@MODEL_DIR\@;\n"),
     qr/"pagedllm_route_only" directive is duplicate/,
     'nginx -t: a second pagedllm_route_only');
like(conf_error("pagedllm_route_only \@MODEL_DIR\@;\n"
                . "pagedllm_engine unix:/tmp/engine.sock;\n"),
     qr/"pagedllm_route_only" is for an nginx that attaches to no engine/,
     'nginx -t: pagedllm_route_only with pagedllm_engine');
like(conf_error("pagedllm_route_only \@MODEL_DIR\@;\n"
                . "pagedllm_prefix_hash_tokens 0;\n"),
     qr/value must be between 1 and 65536/,
     'nginx -t: pagedllm_prefix_hash_tokens 0');
is(conf_error("pagedllm_route_only \@MODEL_DIR\@/ model=llama;\n"), '',
   'nginx -t: a folder and model=NAME are taken');
my $rel = PagedLLM::Deploy->with_http("pagedllm_route_only models/tiny;\n");
mkdir $rel->dir . '/models';
symlink $rel->{model}, $rel->dir . '/models/tiny' or die "symlink: $!\n";
is(($rel->check_conf)[0], 0,
   "nginx -t: a relative folder is under the configuration's folder");

# proxied to a second server, so that the body is read before the log
my $t = PagedLLM::Deploy->with_http(<<'EOF');
pagedllm_route_only @MODEL_DIR@ model=served;

log_format prefix '$request_uri $pagedllm_prefix_hash "$early"';

server {
    listen @LISTEN@;
    access_log logs/prefix.log prefix;

    set $early $pagedllm_prefix_hash;

    location / {
        proxy_pass http://@BACKEND@;
    }

    location /k4/ {
        pagedllm_prefix_hash_tokens 4;
        proxy_pass http://@BACKEND@;
    }
}

server {
    listen @BACKEND@;
    access_log off;
    return 200 "{}";
}
EOF
$t->start_nginx;

my $read = 0;
sub logged {
    my ($method, $uri, $body) = @_;
    my $r = $t->request($method => $uri, $body);
    my $deadline = time + 10;
    while (time < $deadline) {
        open my $fh, '<', $t->dir . '/logs/prefix.log' or next;
        my @l = <$fh>;
        if (@l > $read) {
            my (undef, $hash, $early) = split ' ', $l[$read++];
            return { status => $r->{status}, hash => $hash,
                     early => $early };
        }
        sleep 0.05;
    }
    return {};
}

sub ids { $J->encode({ prompt => [@_], max_tokens => 1 }) }

my $a = logged(POST => '/v1/completions', ids(1, 2, 3, 4, 5, 6));
my $b = logged(POST => '/v1/completions', ids(1, 2, 3, 4, 7));
like($a->{hash}, qr/^[0-9a-f]{16}$/, 'the value is 16 hex digits');
isnt($a->{hash}, $b->{hash},
     'K 64: prompts that differ in their fifth id hash apart');
my $a4 = logged(POST => '/k4/v1/completions', ids(1, 2, 3, 4, 5, 6));
my $b4 = logged(POST => '/k4/v1/completions', ids(1, 2, 3, 4, 7));
is($a4->{hash}, $b4->{hash}, 'K 4 in a location: they hash the same');
isnt($a4->{hash}, $a->{hash}, 'and apart from their K 64 hash');
is($a->{early}, '""', 'read in a rewrite, before the body, it has no value');

my $chat = { messages => [{ role => 'user', content => 'Hello there' }] };
my $c1 = logged(POST => '/v1/chat/completions', $J->encode($chat));
my $c2 = logged(POST => '/v1/chat/completions',
                $J->encode({ %$chat, model => 'served' }));
my $c3 = logged(POST => '/v1/chat/completions',
                $J->encode({ %$chat, model => 'other' }));
like($c1->{hash}, qr/^[0-9a-f]{16}$/, 'a chat with no model has a value');
is($c2->{hash}, $c1->{hash}, 'naming model=NAME changes nothing');
is($c3->{hash}, '-', 'naming another model: no value');

is(logged(POST => '/v1/chat/completions',
          '{"messages": [], "max_tokens": 1}')->{hash}, '-',
   'a body the parser refuses: no value');
is(logged(GET => '/v1/models')->{hash}, '-', 'a GET: no value');
is(logged(POST => '/v1/embeddings', ids(1, 2))->{hash}, '-',
   'not a completion: no value');

$t->finish;
done_testing;
