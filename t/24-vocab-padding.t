#!/usr/bin/perl
# Real checkpoints pad the model's vocabulary beyond the tokenizer's (Qwen2:
# 151936 embedding rows, 151669 tokens).  The worker serves such a model:
# prompt token ids are checked against the model's vocabulary, and sampled
# ids the tokenizer does not know decode to nothing.  A tokenizer with more
# ids than the model is refused (503), since the engine could not embed
# them.

use strict;
use warnings;

use lib 't/lib';
use File::Copy qw(copy);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $probe = PagedLLM::Test->new;
my $padded = $probe->dir . '/padded';
system("$ENV{PAGEDLLM_BUILD}/mktinymodel", '--vocab-size', '576', $padded) == 0
    or die "mktinymodel --vocab-size 576 failed\n";

open my $cf, '<', "$padded/config.json" or die;
my $config = decode_json(do { local $/; <$cf> });
close $cf;
is($config->{vocab_size}, 576, 'the padded model has 576 ids');

my $t = PagedLLM::Test->new(model => $padded)->start;

my $st = $t->wait_status(sub { $_[0]{engine} eq 'attached' }, 10)->{json};
is($st->{engine}, 'attached', 'padded vocabulary: the worker attaches');
like($t->error_log, qr/has 512 tokens, the engine's vocabulary 576/,
     'padded vocabulary: the error log notes the padding');

my $r = $t->completion(prompt => 'The quick brown fox', max_tokens => 8,
                       temperature => 0, ignore_eos => JSON::PP::true);
is($r->{status}, 200, 'a text prompt is served');
is($r->{json}{usage}{completion_tokens}, 8, 'all 8 tokens generated');

$r = $t->completion(prompt => [510, 84, 104, 540, 575], max_tokens => 2,
                    ignore_eos => JSON::PP::true);
is($r->{status}, 200, 'prompt ids in the padding (540, 575) are accepted');

$r = $t->completion(prompt => [510, 84, 576], max_tokens => 2);
is($r->{status}, 400, 'prompt id 576, past the model, is refused');
like($r->{json}{error}{message}, qr/576.*out of vocabulary \(0\.\.575\)/,
     'the refusal names the id and the model vocabulary');

# logit_bias makes the model sample padding id 550 every time
my %only550 = (prompt => 'Hello', max_tokens => 6, temperature => 0,
               logit_bias => { 550 => 100 }, ignore_eos => JSON::PP::true);

$r = $t->completion(%only550);
is($r->{status}, 200, 'sampled padding ids: 200');
is($r->{json}{choices}[0]{text}, '', 'sampled padding ids decode to nothing');
is($r->{json}{usage}{completion_tokens}, 6, 'and still count as tokens');
is($r->{json}{choices}[0]{finish_reason}, 'length', 'finish_reason length');

$r = $t->completion(%only550, logprobs => 3);
is($r->{status}, 200, 'padding ids with logprobs: 200');
my $lp = $r->{json}{choices}[0]{logprobs} // {};
is_deeply($lp->{tokens}, [('') x 6], 'logprobs: each padding token is ""');
is(scalar @{ $lp->{top_logprobs} // [] }, 6, 'logprobs: top entries per token');

my $s = $t->stream_start('/v1/completions',
                         $PagedLLM::Test::JSON->encode({ %only550,
                                                         stream => JSON::PP::true }));
is($s->{status}, 200, 'streaming padding ids: 200');
my $c = PagedLLM::Test::read_chunks([$s], time + 30)->[0];
ok($c->{complete} && !$c->{error}, 'streaming padding ids: a complete stream');
my ($ev, $err) = PagedLLM::Test::sse_events($c->{chunks});
ok(!$err, 'streaming padding ids: well-formed events');
is($ev->[-1]{data}, '[DONE]', 'streaming padding ids: [DONE] last');
my @text = map { $PagedLLM::Test::JSON->decode($_->{data})->{choices}[0]{text} }
           @$ev[0 .. $#$ev - 1];
is(join('', @text), '', 'streaming padding ids: no text');
close $s->{sock};

$r = $t->request(POST => '/v1/chat/completions',
                 $PagedLLM::Test::JSON->encode({
                     messages => [{ role => 'user', content => 'hi' }],
                     max_tokens => 4, logit_bias => { 560 => 100 } }));
is($r->{status}, 200, 'chat with sampled padding ids: 200');
is($r->{json}{choices}[0]{message}{content}, '', 'chat: no text');

$st = $t->wait_status(sub { $_[0]{kv_blocks}{used} == 0 }, 5)->{json};
is($st->{kv_blocks}{used}, 0, 'every KV block is free again');
$t->finish;

# A tokenizer with an id past the model's vocabulary: not served.
my $big = $probe->dir . '/big';
mkdir $big or die "$big: $!";
my $tiny = "$ENV{PAGEDLLM_BUILD}/models/tiny";
opendir my $dh, $tiny or die "$tiny: $!";
for my $f (grep { -f "$tiny/$_" } readdir $dh) {
    copy("$tiny/$f", "$big/$f") or die "copy $f: $!";
}
open my $tf, '<', "$big/tokenizer.json" or die;
my $tok = decode_json(do { local $/; <$tf> });
close $tf;
push @{ $tok->{added_tokens} },
    { id => 600, content => '<|extra|>', single_word => JSON::PP::false,
      lstrip => JSON::PP::false, rstrip => JSON::PP::false,
      normalized => JSON::PP::false, special => JSON::PP::true };
open $tf, '>', "$big/tokenizer.json" or die;
print $tf encode_json($tok);
close $tf;

my $b = PagedLLM::Test->new(model => $big)->start;
$r = $b->completion(prompt => 'x', max_tokens => 2);
is($r->{status}, 503, 'tokenizer larger than the model: 503');
is($b->status->{json}{engine}, 'detached', 'tokenizer larger: detached');
like($b->error_log, qr/has 601 tokens, more than the engine's vocabulary of 512/,
     'tokenizer larger: the error log says so');
$b->finish;

$probe->finish;
done_testing;
