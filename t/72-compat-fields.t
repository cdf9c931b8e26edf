#!/usr/bin/perl
# What clients of OpenAI and vLLM send, and what they expect back, each
# checked by the status, the body's fields and the token counts:
# - max_completion_tokens is the limit whenever it is given, whatever the
#   order of the keys, and each of the two is checked;

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $t = PagedLLM::Test->new->start;

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
ok($ctx > 0, "the model's context: $ctx");

sub chat_raw { $t->request(POST => '/v1/chat/completions', $_[0]) }

sub refused_ok {
    my ($r, $param, $like, $name) = @_;
    my $e = ($r->{json} // {})->{error} // {};
    ok($r->{status} == 400 && ($e->{param} // '') eq $param
       && ($e->{message} // '') =~ $like,
       "$name: 400 naming $param")
        or diag("$r->{status}: $r->{body}");
}

# ---- max_tokens and max_completion_tokens -----------------------------------

my $user = '"messages":[{"role":"user","content":"Count."}],"ignore_eos":true';

for my $order ('"max_completion_tokens":3,"max_tokens":5',
               '"max_tokens":5,"max_completion_tokens":3')
{
    my $r = chat_raw("{$user,$order}");
    is($r->{json}{usage}{completion_tokens}, 3,
       "{$order}: max_completion_tokens is the limit")
        or diag($r->{body});
}

my $r = chat_raw("{$user,\"max_completion_tokens\":null,\"max_tokens\":4}");
is($r->{json}{usage}{completion_tokens}, 4,
   'max_completion_tokens null: max_tokens is the limit');
$r = chat_raw("{$user,\"max_tokens\":4}");
is($r->{json}{usage}{completion_tokens}, 4, 'max_tokens alone on chat');

refused_ok(chat_raw("{$user,\"max_completion_tokens\":3,\"max_tokens\":0}"),
           'max_tokens', qr/'max_tokens' must be an integer from 1/,
           'max_tokens 0 beside a good max_completion_tokens');
refused_ok(chat_raw("{$user,\"max_tokens\":3,\"max_completion_tokens\":2.5}"),
           'max_completion_tokens', qr/must be an integer/,
           'max_completion_tokens 2.5 beside a good max_tokens');
refused_ok(chat_raw("{$user,\"max_tokens\":\"3\","
                    . "\"max_completion_tokens\":3}"),
           'max_tokens', qr/must be an integer/,
           'max_tokens a string beside max_completion_tokens');

$t->finish;
done_testing;
