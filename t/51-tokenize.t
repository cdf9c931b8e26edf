#!/usr/bin/perl
# vLLM's POST /tokenize (a prompt or a conversation), POST /detokenize and
# GET /version, at the root (location / { pagedllm; }) and under /v1/: the
# ids are those a completion of the same prompt is fed, they decode back
# to the text, and bad input is a 4xx in OpenAI's shape.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new(server => '
        location / {
            pagedllm;
        }
')->start;

sub post {
    my ($path, $req) = @_;
    return $t->request(POST => $path,
                       ref $req ? $J->encode($req) : $req);
}

my $max_model_len =
    $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
ok($max_model_len > 0, 'the model has a context length');

my $text = 'Hello world, tokenize me';

my $r = post('/tokenize', { model => 'tiny', prompt => $text });
is($r->{status}, 200, 'tokenize a prompt at the root: 200');
is_deeply([ sort keys %{ $r->{json} } ], [qw(count max_model_len tokens)],
          'tokenize: count, max_model_len, tokens');
my $ids = $r->{json}{tokens};
ok(@$ids > 0 && !grep({ !/^\d+$/ } @$ids), 'tokenize: ids are integers');
is($r->{json}{count}, scalar @$ids, 'tokenize: count is the number of ids');
is($r->{json}{max_model_len}, $max_model_len,
   'tokenize: max_model_len is the model\'s');

my $c = $t->completion(prompt => $text, max_tokens => 1);
is($c->{json}{usage}{prompt_tokens}, $r->{json}{count},
   'tokenize: count equals the prompt_tokens of a completion of the prompt');

my $v1 = post('/v1/tokenize', { prompt => $text });
is($v1->{status}, 200, 'tokenize under /v1/, model left out: 200');
is_deeply($v1->{json}{tokens}, $ids, 'under /v1/: the same ids');

my $plain = post('/tokenize', { prompt => $text,
                                add_special_tokens => JSON::PP::false });
is($plain->{status}, 200, 'tokenize without special tokens: 200');
ok($plain->{json}{count} <= $r->{json}{count},
   'without special tokens: no more ids than with them');
is_deeply([ @$ids[ @$ids - $plain->{json}{count} .. $#$ids ] ],
          $plain->{json}{tokens},
          'without special tokens: the text\'s ids, the BOS/EOS left off');

my $d = post('/detokenize', { model => 'tiny',
                              tokens => $plain->{json}{tokens} });
is($d->{status}, 200, 'detokenize: 200');
is_deeply([ keys %{ $d->{json} } ], ['prompt'], 'detokenize: {prompt}');
is($d->{json}{prompt}, $text, 'detokenize: the ids decode back to the text');

$d = post('/v1/detokenize', { tokens => [] });
is($d->{json}{prompt}, '', 'detokenize of no ids: the empty string');

my @messages = ({ role => 'system', content => 'Be brief.' },
                { role => 'user', content => 'Hi there' });
$r = post('/tokenize', { model => 'tiny', messages => \@messages });
is($r->{status}, 200, 'tokenize a chat: 200');
is($r->{json}{count}, scalar @{ $r->{json}{tokens} },
   'chat: count is the number of ids');
is($r->{json}{max_model_len}, $max_model_len, 'chat: max_model_len');
$c = $t->request(POST => '/v1/chat/completions',
                 $J->encode({ messages => \@messages, max_tokens => 1 }));
is($c->{json}{usage}{prompt_tokens}, $r->{json}{count},
   'chat: count equals the prompt_tokens of a chat completion');
my $chat_ids = $r->{json}{tokens};

$d = post('/detokenize', { tokens => $chat_ids });
like($d->{json}{prompt}, qr/Be brief\..*Hi there/s,
     'chat: the ids decode to the rendered conversation');

$r = post('/tokenize', { messages => \@messages,
                         add_generation_prompt => JSON::PP::false });
is($r->{status}, 200, 'chat without the generation prompt: 200');
ok($r->{json}{count} < @$chat_ids,
   'without the generation prompt: fewer ids');
is_deeply($r->{json}{tokens}, [ @$chat_ids[0 .. $r->{json}{count} - 1] ],
          'without the generation prompt: a prefix of the ids with it');

$r = post('/tokenize', { messages => \@messages,
                         add_special_tokens => JSON::PP::true });
ok($r->{json}{count} >= @$chat_ids,
   'chat with add_special_tokens: at least as many ids');

$r = $t->request(GET => '/version');
is($r->{status}, 200, 'GET /version: 200');
like($r->{json}{version} // '', qr/^\d+\.\d+\.\d+$/,
     'version: a version string');
is($t->request(GET => '/v1/version')->{json}{version}, $r->{json}{version},
   'GET /v1/version: the same');
$r = $t->request(POST => '/version', '{}');
is($r->{status}, 405, 'POST /version: 405');
is($r->{headers}{allow}, 'GET, HEAD', 'POST /version: Allow: GET, HEAD');
$r = $t->request(GET => '/tokenize');
is($r->{status}, 405, 'GET /tokenize: 405');
is($r->{headers}{allow}, 'POST', 'GET /tokenize: Allow: POST');

sub error_ok {
    my ($r, $status, $param, $name) = @_;
    my $e = $r->{json} && $r->{json}{error};
    ok($r->{status} == $status && ref $e eq 'HASH' && length $e->{message}
       && join(',', sort keys %$e) eq 'code,message,param,type'
       && ($e->{param} // '') eq ($param // ''), $name)
        or diag("got $r->{status}: " . ($r->{body} // ''));
    return $e;
}

my $e = error_ok(post('/tokenize', { model => 'gpt-4', prompt => 'x' }), 404,
                 'model', 'tokenize, unknown model: 404');
is($e->{code}, 'model_not_found', 'unknown model: code model_not_found');
$e = error_ok(post('/detokenize', { model => 'gpt-4', tokens => [1] }), 404,
              'model', 'detokenize, unknown model: 404');
is($e->{code}, 'model_not_found', 'detokenize: code model_not_found');

my @bad = (
    [ '/tokenize', { prompt => 5 }, 'prompt', 'prompt a number' ],
    [ '/tokenize', { prompt => [1, 2] }, 'prompt', 'prompt of token ids' ],
    [ '/tokenize', {}, 'prompt', 'no prompt nor messages' ],
    [ '/tokenize', { prompt => 'x', add_special_tokens => 'yes' },
      'add_special_tokens', 'add_special_tokens a string' ],
    [ '/tokenize', { prompt => 'x', temperature => 1 }, 'temperature',
      'a sampling parameter' ],
    [ '/tokenize', { messages => 'hi' }, 'messages', 'messages a string' ],
    [ '/tokenize', { messages => [{ role => 'robot', content => 'x' }] },
      'messages', 'a message of an unknown role' ],
    [ '/tokenize', { messages => \@messages, add_generation_prompt => 1 },
      'add_generation_prompt', 'add_generation_prompt a number' ],
    [ '/tokenize', { messages => \@messages, prompt => 'x' }, 'prompt',
      'prompt beside messages' ],
    [ '/detokenize', { tokens => 'abc' }, 'tokens', 'tokens a string' ],
    [ '/detokenize', { tokens => [1, 'a'] }, 'tokens', 'a token not a number' ],
    [ '/detokenize', { tokens => [1.5] }, 'tokens', 'a token not integer' ],
    [ '/detokenize', { tokens => [-1] }, 'tokens', 'a negative token' ],
    [ '/detokenize', { tokens => [100000000] }, 'tokens',
      'a token out of vocabulary' ],
    [ '/detokenize', {}, 'tokens', 'no tokens' ],
    [ '/detokenize', { tokens => [1], prompt => 'x' }, 'prompt',
      'detokenize with a prompt' ],
);
for my $b (@bad) {
    error_ok(post($b->[0], $b->[1]), 400, $b->[2], "$b->[0], $b->[3]: 400");
}
error_ok(post('/tokenize', '{"prompt": '), 400, undef,
         'tokenize, malformed JSON: 400');
error_ok(post('/detokenize', '[1, 2]'), 400, undef,
         'detokenize, a JSON array body: 400');

# a body long enough to be decoded, tokenized and decoded back on the
# thread pool
my $long = join ' ', map { "word$_" } 1 .. 2000;
$r = post('/tokenize', { prompt => $long, add_special_tokens => JSON::PP::false });
is($r->{status}, 200, 'tokenize a long prompt: 200');
$d = post('/detokenize', { tokens => $r->{json}{tokens} });
is($d->{json}{prompt}, $long, 'a long prompt decodes back to itself');

is($t->completion(prompt => 'Hello', max_tokens => 2)->{status}, 200,
   'completions work after all of it');

$t->finish;
done_testing();
