#!/usr/bin/perl
# Bad input gets a clear OpenAI-style error naming the field, and loses
# nothing: afterwards nothing runs, no block is held, and good requests work.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new(server => '
        client_max_body_size 64k;
        client_body_buffer_size 1k;
')->start;

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};

sub error_ok {
    my ($r, $status, $param, $name) = @_;
    my $e = $r->{json} && $r->{json}{error};
    my $ok = $r->{status} == $status && ref $e eq 'HASH'
        && defined $e->{message} && length $e->{message}
        && join(',', sort keys %$e) eq 'code,message,param,type'
        && (defined $param ? (defined $e->{param} && $e->{param} eq $param)
                           : !defined $e->{param});
    ok($ok, $name) or diag("got $r->{status}: " . ($r->{body} // ''));
    return $e;
}

my $e = error_ok($t->request(POST => '/v1/completions', '{"prompt": "x",'),
                 400, undef, 'malformed JSON: 400, param null');
is($e->{type}, 'invalid_request_error', 'malformed JSON: invalid_request_error');
ok(exists $e->{code} && !defined $e->{code}, 'malformed JSON: code null');

error_ok($t->request(POST => '/v1/completions', '[1, 2]'), 400, undef,
         'a JSON array body: 400');
error_ok($t->request(POST => '/v1/completions', ''), 400, undef,
         'an empty body: 400');

my @cases = (
    [ { max_tokens => 3 }, 'prompt', 'missing prompt' ],
    [ { prompt => 5 }, 'prompt', 'prompt of the wrong type' ],
    [ { prompt => [] }, 'prompt', 'empty prompt array' ],
    [ { prompt => [600] }, 'prompt', 'token id out of vocabulary' ],
    [ { prompt => [-1] }, 'prompt', 'negative token id' ],
    [ { prompt => [1, 'a'] }, 'prompt', 'mixed prompt array' ],
    [ { prompt => ['a', [2]] }, 'prompt', 'batched prompts of two kinds' ],
    [ { prompt => [[1], [600]] }, 'prompt', 'batched: an id out of vocabulary' ],
    [ { prompt => [(1) x $ctx] }, 'prompt', 'prompt as long as the context' ],
    [ { prompt => [1, 2, 3], max_tokens => $ctx - 1 }, 'max_tokens',
      'prompt + max_tokens over max_model_len' ],
    [ { prompt => 'x', max_tokens => 0 }, 'max_tokens', 'max_tokens 0' ],
    [ { prompt => 'x', max_tokens => '5' }, 'max_tokens', 'max_tokens as a string' ],
    [ { prompt => 'x', max_tokens => 1.5 }, 'max_tokens', 'max_tokens not integer' ],
    [ { prompt => 'x', temperature => 2.5 }, 'temperature', 'temperature above 2' ],
    [ { prompt => 'x', temperature => -0.1 }, 'temperature', 'negative temperature' ],
    [ { prompt => 'x', temperature => 'hot' }, 'temperature', 'temperature as a string' ],
    [ { prompt => 'x', top_p => 0 }, 'top_p', 'top_p 0' ],
    [ { prompt => 'x', top_p => 1.5 }, 'top_p', 'top_p above 1' ],
    [ { prompt => 'x', top_k => -2 }, 'top_k', 'top_k below -1' ],
    [ { prompt => 'x', top_k => 2.5 }, 'top_k', 'top_k not integer' ],
    [ { prompt => 'x', n => 0 }, 'n', 'n of 0' ],
    [ { prompt => 'x', seed => 1.5 }, 'seed', 'seed not integer' ],
    [ { prompt => 'x', seed => 'abc' }, 'seed', 'seed as a string' ],
    [ { prompt => 'x', stream => 'yes' }, 'stream', 'stream not boolean' ],
    [ { prompt => 'x', ignore_eos => 1 }, 'ignore_eos', 'ignore_eos not boolean' ],
    [ { prompt => 'x', stream_options => { include_usage => JSON::PP::true } },
      'stream_options', 'stream_options without stream' ],
    [ { prompt => 'x', stream => JSON::PP::true,
        stream_options => { include_usage => 1 } },
      'stream_options', 'include_usage not boolean' ],
    [ { prompt => 'x', logprobs => 21 }, 'logprobs', 'logprobs above 20' ],
    [ { prompt => 'x', logprobs => JSON::PP::true }, 'logprobs',
      'logprobs as a boolean on completions' ],
    [ { prompt => 'x', stop => [qw(a b c d e)] }, 'stop', 'five stop strings' ],
    [ { prompt => 'x', stop => [''] }, 'stop', 'an empty stop string' ],
    [ { prompt => 'x', stop => 7 }, 'stop', 'stop as a number' ],
    [ { prompt => 'x', suffix => 'end' }, 'suffix', 'suffix' ],
    [ { prompt => 'x', presence_penalty => 2.5 }, 'presence_penalty',
      'presence_penalty out of range' ],
    [ { prompt => 'x', frequency_penalty => 3 }, 'frequency_penalty',
      'frequency_penalty out of range' ],
    [ { prompt => 'x', logit_bias => { abc => 5 } }, 'logit_bias',
      'logit_bias key not a token id' ],
    [ { prompt => 'x', logit_bias => { 999999 => 5 } }, 'logit_bias',
      'logit_bias key out of vocabulary' ],
    [ { prompt => 'x', logit_bias => { 1 => 'up' } }, 'logit_bias',
      'logit_bias value not a number' ],
    [ { prompt => 'x', logit_bias => [1] }, 'logit_bias',
      'logit_bias not an object' ],
    [ { prompt => 'x', min_p => 1.5 }, 'min_p', 'min_p above 1' ],
    [ { prompt => 'x', repetition_penalty => 0 }, 'repetition_penalty',
      'repetition_penalty 0' ],
    [ { prompt => 'x', min_tokens => 5, max_tokens => 4 }, 'min_tokens',
      'min_tokens above max_tokens' ],
    [ { prompt => 'x', min_tokens => -1 }, 'min_tokens', 'negative min_tokens' ],
    [ { prompt => 'x', stop_token_ids => [ -3 ] }, 'stop_token_ids',
      'stop_token_ids out of vocabulary' ],
    [ { prompt => 'x', stop_token_ids => 5 }, 'stop_token_ids',
      'stop_token_ids not an array' ],
    [ { prompt => 'x', n => 3, best_of => 2 }, 'best_of', 'best_of below n' ],
    [ { prompt => 'x', best_of => 17 }, 'best_of', 'best_of above 16' ],
    [ { prompt => 'x', best_of => 2, stream => JSON::PP::true }, 'best_of',
      'best_of above n while streaming' ],
    [ { prompt => 'x', frobnicate => 1 }, 'frobnicate', 'an unknown field' ],
    [ { prompt => 'x', model => 7 }, 'model', 'model of the wrong type' ],
);

for my $c (@cases) {
    my ($req, $param, $name) = @$c;
    error_ok($t->completion(%$req), 400, $param, "$name: 400, param $param");
}

# a field's name longer than the error's param, cut inside a character
# (the e-acute's two bytes straddle the cut): still a 400 in JSON, the
# param cut before that character
my $long = ('a' x 62) . "\x{e9}b";
error_ok($t->request(POST => '/v1/completions',
                     $J->encode({ prompt => 'x', $long => 1 })),
         400, 'a' x 62, 'an unknown field named past the param\'s size: 400');

$e = error_ok($t->request(POST => '/v1/completions',
                          '{"prompt":"n is 17","n":17}'), 400, 'n',
              'n=17: 400');
like($e->{message}, qr/'n' must be an integer from 1 to 16/,
     'n=17: the message gives the range');

# values no integer type holds (nginx's %f cannot print them): the message
# gives them as the request sent them
$e = error_ok($t->request(POST => '/v1/completions',
                          '{"prompt":"x","max_tokens":1e+30}'), 400,
              'max_tokens', 'max_tokens 1e+30: 400');
like($e->{message}, qr/got 1e\+30$/, 'max_tokens 1e+30: the message says 1e+30');
$e = error_ok($t->request(POST => '/v1/completions',
                          '{"prompt":"x","temperature":-1e300}'), 400,
              'temperature', 'temperature -1e300: 400');
like($e->{message}, qr/got -1e\+300$/,
     'temperature -1e300: the message says -1e+300');
$e = error_ok($t->request(POST => '/v1/completions',
                          '{"prompt":"x","logit_bias":{"1":1e200}}'), 400,
              'logit_bias', 'logit_bias 1e200: 400');
like($e->{message}, qr/got 1e\+200$/, 'logit_bias 1e200: the message says 1e+200');

$e = error_ok($t->completion(model => 'gpt-4', prompt => 'x'), 404, 'model',
              'unknown model: 404');
is($e->{code}, 'model_not_found', 'unknown model: code model_not_found');

error_ok($t->request(POST => '/v1/completions', '{"prompt":"bad ' . "\xff\xfe" . ' byte"}'),
         400, 'prompt', 'invalid UTF-8 in prompt: 400, param prompt');
error_ok($t->request(POST => '/v1/completions', '{"prompt":"ok","user":"' . "\xc3(" . '"}'),
         400, 'user', 'invalid UTF-8 in another field names that field');
error_ok($t->request(POST => '/v1/completions', '{"prompt":"' . "\xed\xa0\x80" . '"}'),
         400, 'prompt', 'a UTF-8 encoded surrogate: 400');

my $ok = $t->completion(prompt => 'x', echo => JSON::PP::false, logprobs => undef,
                        stop => undef, n => 1, best_of => 1, top_k => -1,
                        presence_penalty => 0, user => 'u', max_tokens => 2);
is($ok->{status}, 200, 'fields that ask for nothing are accepted');

error_ok($t->request(GET => '/v1/completions'), 405, undef,
         'GET /v1/completions: 405');
is($t->request(GET => '/v1/completions')->{headers}{allow}, 'POST',
   '405 says Allow: POST');
error_ok($t->request(POST => '/v1/models', '{}'), 405, undef,
         'POST /v1/models: 405');
$e = error_ok($t->request(GET => '/v1/nothing'), 404, undef, 'unknown path: 404');
is($e->{code}, 'not_found', 'unknown path: code not_found');
$e = error_ok($t->request(GET => '/v1/models/org/other-model'), 404, 'model',
              'GET a model not served: 404');
is($e->{code}, 'model_not_found', 'a model not served: code model_not_found');
like($e->{message}, qr{`org/other-model`}, 'a model not served: named');
error_ok($t->request(POST => '/v1/models/tiny', '{}'), 405, undef,
         'POST /v1/models/tiny: 405');
is($t->request(POST => '/pagedllm/status', '{}')->{status}, 405,
   'POST to the status location: 405');

my $big = $t->request(POST => '/v1/completions',
                      $J->encode({ prompt => 'a' x 70000 }));
is($big->{status}, 413, 'a body over client_max_body_size: 413');

# bigger than client_body_buffer_size: nginx keeps it in a temp file
my $file = $t->completion(prompt => 'word ' x 400, max_tokens => 2,
                          ignore_eos => JSON::PP::true);
is($file->{status}, 200, 'a body read from a temp file is served');
is($file->{json}{usage}{completion_tokens}, 2, 'temp-file body: completion');

my $st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{kv_blocks}{used} == 0 }, 5);
is($st->{json}{requests}{running}, 0, 'after bad input: nothing running');
is($st->{json}{kv_blocks}{used}, 0, 'after bad input: no block held');

my $good = $t->completion(prompt => 'Hello', max_tokens => 3);
is($good->{status}, 200, 'a good request still works');
unlike($t->error_log, qr/\[(alert|crit|emerg)\]/, 'no alerts in the error log');

$t->finish;
done_testing;
