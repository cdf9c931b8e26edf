#!/usr/bin/perl
# API keys as README.md's "API keys" section configures them, its blocks
# taken from the README as written (only the key service's port is
# changed to a free one): a map on $http_authorization, and auth_request
# asking a key service.  Either way a missing or wrong key gets 401 with
# an OpenAI-style JSON error, and each right key gets a 200: a stream of
# tokens ending in [DONE], and a whole completion.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Test;

my %KEYS = (alice => 'sk-alice-7f3a9c1e5b2d', bob => 'sk-bob-2c8e4a6f0d1b');

# README's indented block after "<!-- t/56-auth.t: $name -->"
sub readme_block {
    my ($name) = @_;
    open my $fh, '<', 'README.md' or die "README.md: $!";
    my (@block, $in);
    while (my $line = <$fh>) {
        if (!$in) {
            $in = $line =~ /^<!-- t\/56-auth\.t: \Q$name\E -->$/;
            next;
        }
        last if $line =~ /^\S/ && @block;
        push @block, $line =~ s/^    //r if $line =~ /^    / || @block;
    }
    die "README.md has no block '$name'\n" unless @block;
    pop @block while $block[-1] =~ /^\s*$/;
    return join '', @block;
}

sub indent { join '', map { "        $_\n" } split /\n/, $_[0] }

sub stream_with_key {
    my ($t, $key) = @_;
    my $body = encode_json({ prompt => 'Hello', max_tokens => 6,
                             stream => JSON::PP::true });
    my $s = $t->send_request(POST => '/v1/completions', $body,
                             Authorization => "Bearer $key");
    my $buf = '';
    my $r = PagedLLM::Test::read_head($s, \$buf, time + 30)
        or return { status => 0 };
    $r->{sock} = $s;
    $r->{buf} = $buf;
    my $c = PagedLLM::Test::read_chunks([$r], time + 60)->[0];
    close $s;
    my ($ev) = PagedLLM::Test::sse_events($c->{chunks});
    return { status => $r->{status}, data => [ map { $_->{data} } @$ev ] };
}

sub refused {
    my ($name, $r) = @_;
    is($r->{status}, 401, "$name: 401");
    like($r->{headers}{'content-type'} // '', qr{^application/json},
         "$name: a JSON body");
    is($r->{json}{error}{code}, 'invalid_api_key',
       "$name: an OpenAI-style error, code invalid_api_key");
    is($r->{json}{error}{type}, 'invalid_request_error',
       "$name: type invalid_request_error");
}

sub check_keys {
    my ($how, $t) = @_;
    my $body = encode_json({ prompt => 'Hello', max_tokens => 3 });

    refused("$how, no key",
            $t->request(POST => '/v1/completions', $body));
    refused("$how, a wrong key",
            $t->request(POST => '/v1/completions', $body,
                        Authorization => 'Bearer sk-mallory-000000000000'));
    refused("$how, a right key without Bearer",
            $t->request(POST => '/v1/completions', $body,
                        Authorization => $KEYS{alice}));

    my $s = stream_with_key($t, $KEYS{alice});
    is($s->{status}, 200, "$how, alice's key: 200");
    my @data = @{ $s->{data} };
    is($data[-1], '[DONE]', "$how, alice's key: the stream ends in [DONE]");
    my @text = map { decode_json($_)->{choices}[0]{text} }
               grep { $_ ne '[DONE]' } @data;
    ok(@text >= 2, "$how, alice's key: tokens streamed in "
                   . scalar(@text) . ' events');

    my $r = $t->request(POST => '/v1/completions', $body,
                        Authorization => "Bearer $KEYS{bob}");
    is($r->{status}, 200, "$how, bob's key: 200");
    is($r->{json}{usage}{completion_tokens}, 3,
       "$how, bob's key: the completion");
}

# a map on $http_authorization
my $t = PagedLLM::Test->new(
    http => indent(readme_block('map, http')),
    api => indent(readme_block('map, server')),
)->start;
check_keys('map', $t);
$t->finish;

# auth_request to a key service (nginx itself, as the README shows)
my $port = PagedLLM::Test::free_port();
my $service = readme_block('auth_request, http');
my $server = readme_block('auth_request, server');
ok($service =~ s/127\.0\.0\.1:9000/127.0.0.1:$port/g
   && $server =~ s/127\.0\.0\.1:9000/127.0.0.1:$port/g,
   'auth_request: the key service on a free port');
$t = PagedLLM::Test->new(
    http => indent(readme_block('map, http')) . indent($service),
    api => indent($server),
)->start;
check_keys('auth_request', $t);
$t->finish;

done_testing;
