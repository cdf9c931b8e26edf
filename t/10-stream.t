#!/usr/bin/perl
# Streaming and non-streaming completions through nginx and the engine:
# SSE framing and shape, usage, and the same text both ways.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new->start;

my $models = $t->request(GET => '/v1/models');
is($models->{status}, 200, 'GET /v1/models answers 200');
is($models->{json}{object}, 'list', 'models: object is list');
my $model = $models->{json}{data}[0]{id};
is($model, 'tiny', 'models: the served model is listed by name');
is($models->{json}{data}[0]{object}, 'model', 'models: entry is a model');

# OpenAI's retrieve: GET /v1/models/ID
my $one = $t->request(GET => '/v1/models/tiny');
is($one->{status}, 200, 'GET /v1/models/tiny answers 200');
is_deeply([ @{ $one->{json} }{qw(id object owned_by max_model_len)} ],
          [ @{ $models->{json}{data}[0] }{qw(id object owned_by max_model_len)} ],
          'models/tiny: the list\'s entry');

sub stream {
    my (%req) = @_;
    my $s = $t->stream_start('/v1/completions', $J->encode(\%req));
    my $c = PagedLLM::Test::read_chunks([$s], time + 60)
        ->[0];
    close $s->{sock};
    my ($ev, $err) = PagedLLM::Test::sse_events($c->{chunks});
    return { %$s, %$c, events => $ev, sse_error => $err };
}

my $max = 12;
my $s = stream(prompt => 'Hello', max_tokens => $max, ignore_eos => JSON::PP::true,
               stream => JSON::PP::true, temperature => 0,
               stream_options => { include_usage => JSON::PP::true });

is($s->{status}, 200, 'stream: 200');
like($s->{headers}{'content-type'}, qr{^text/event-stream}, 'stream: SSE content type');
is($s->{headers}{'cache-control'}, 'no-cache', 'stream: Cache-Control no-cache');
is($s->{headers}{'transfer-encoding'}, 'chunked', 'stream: chunked on HTTP/1.1');
ok(!$s->{error}, 'stream: chunked framing is byte-correct')
    or diag($s->{error});
ok($s->{complete}, 'stream: ends with the last chunk');
ok(!$s->{sse_error}, 'stream: body is exactly a sequence of data: events')
    or diag($s->{sse_error});

my @ev = @{ $s->{events} };
is($ev[-1]{data}, '[DONE]', 'stream: last event is [DONE]');
pop @ev;

my @json = map { my $d = eval { $J->decode($_->{data}) }; $d } @ev;
is(scalar(grep { !defined } @json), 0, 'stream: every data line is valid JSON');

my $usage = pop @json;
is_deeply($usage->{choices}, [], 'stream: usage chunk has no choices');
is($usage->{usage}{completion_tokens}, $max, 'stream: usage counts max_tokens');
ok($usage->{usage}{prompt_tokens} >= 1, 'stream: usage counts the prompt');
is($usage->{usage}{total_tokens},
   $usage->{usage}{prompt_tokens} + $max, 'stream: usage total is the sum');

my @tok = @json;
ok(@tok == $max || (@tok == $max + 1 && $tok[-1]{choices}[0]{text} eq ''),
   "stream: $max token events (plus at most an empty final one)")
    or diag(scalar(@tok) . ' events');

my %ids = map { $_->{id} => 1 } @tok, $usage;
is(scalar(keys %ids), 1, 'stream: one id for every chunk');
like((keys %ids)[0], qr/^cmpl-\w+$/, 'stream: id looks like cmpl-...');

my $shape_ok = 1;
for my $e (@tok) {
    my $c = $e->{choices};
    $shape_ok &&= $e->{object} eq 'text_completion'
        && $e->{model} eq $model && $e->{created} =~ /^\d+$/
        && ref $c eq 'ARRAY' && @$c == 1 && $c->[0]{index} == 0
        && exists $c->[0]{logprobs} && !defined $c->[0]{logprobs}
        && defined $c->[0]{text} && !ref $c->[0]{text};
}
ok($shape_ok, 'stream: every token event has the completion chunk shape');

my @reasons = map { $_->{choices}[0]{finish_reason} } @tok;
is($reasons[-1], 'length', 'stream: the last event says finish_reason length');
is(scalar(grep { defined } @reasons[0 .. $#reasons - 1]), 0,
   'stream: no finish_reason before the last event');

my $streamed = join '', map { $_->{choices}[0]{text} } @tok;

my $r = $t->completion(prompt => 'Hello', max_tokens => $max,
                       ignore_eos => JSON::PP::true, temperature => 0);
is($r->{status}, 200, 'non-stream: 200');
like($r->{headers}{'content-type'}, qr{^application/json}, 'non-stream: JSON');
my $b = $r->{json};
like($b->{id}, qr/^cmpl-\w+$/, 'non-stream: id');
is($b->{object}, 'text_completion', 'non-stream: object');
is($b->{model}, $model, 'non-stream: model');
ok($b->{created} =~ /^\d+$/ && abs($b->{created} - time) < 60, 'non-stream: created is now');
is(scalar @{ $b->{choices} }, 1, 'non-stream: one choice');
is($b->{choices}[0]{index}, 0, 'non-stream: choice index 0');
ok(exists $b->{choices}[0]{logprobs} && !defined $b->{choices}[0]{logprobs},
   'non-stream: logprobs null');
is($b->{choices}[0]{finish_reason}, 'length', 'non-stream: finish_reason length');
is($b->{usage}{completion_tokens}, $max, 'non-stream: completion tokens');
is($b->{usage}{prompt_tokens}, $usage->{usage}{prompt_tokens},
   'non-stream: same prompt tokens as the stream');
is($b->{usage}{total_tokens}, $b->{usage}{prompt_tokens} + $max,
   'non-stream: total tokens');
is($b->{choices}[0]{text}, $streamed,
   'greedy: non-stream text equals the concatenated stream');

my %seeded = (prompt => 'Once upon', max_tokens => 10, temperature => 1.0,
              seed => 1234, ignore_eos => JSON::PP::true);
my $ns = $t->completion(%seeded);
my $ss = stream(%seeded, stream => JSON::PP::true);
my @sj = map { $J->decode($_->{data}) } grep { $_->{data} ne '[DONE]' }
         @{ $ss->{events} };
is(join('', map { $_->{choices}[0]{text} } @sj), $ns->{json}{choices}[0]{text},
   'seeded: non-stream text equals the concatenated stream');
is(scalar(grep { $_->{usage} } @sj), 0, 'stream: no usage chunk unless asked');

my $ids = $t->completion(prompt => [510, 72, 101, 108], max_tokens => 5,
                         ignore_eos => JSON::PP::true, temperature => 0);
is($ids->{status}, 200, 'token-id prompt: 200');
is($ids->{json}{usage}{prompt_tokens}, 4, 'token-id prompt: 4 prompt tokens');
is($ids->{json}{usage}{completion_tokens}, 5, 'token-id prompt: 5 completion tokens');

my $nested = $t->completion(prompt => [[510, 72, 101, 108]], max_tokens => 5,
                            ignore_eos => JSON::PP::true, temperature => 0);
is($nested->{json}{choices}[0]{text}, $ids->{json}{choices}[0]{text},
   'one-element array of token ids: same text as the flat array');

my $one_str = $t->completion(prompt => ['Hello'], max_tokens => $max,
                             ignore_eos => JSON::PP::true, temperature => 0);
is($one_str->{json}{choices}[0]{text}, $streamed,
   'one-element array of a string: same text as the string');

my $named = $t->completion(model => $model, prompt => 'Hi', max_tokens => 3);
is($named->{status}, 200, 'the served model name is accepted');

my $stop = $t->completion(prompt => 'Hello', max_tokens => 200, temperature => 0);
is($stop->{status}, 200, 'without ignore_eos: 200');
ok($stop->{json}{choices}[0]{finish_reason} =~ /^(stop|length)$/,
   'without ignore_eos: finish_reason is stop or length');
ok($stop->{json}{usage}{completion_tokens} <= 200, 'without ignore_eos: at most max_tokens');

$t->finish;
done_testing;
