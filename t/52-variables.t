#!/usr/bin/perl
# The $pagedllm_* variables, written by a log_format into an access log:
# for a completion (whole and streamed) and a chat the id, model, token
# counts and finish reasons are those of the response, the id is also its
# X-Request-Id, the time to the first token and the queue time lie within
# the request's time, the cached tokens are usage's
# prompt_tokens_details.cached_tokens: 0 for a new prompt, whole prefix
# cache blocks for a long prompt sent again; a request refused before it
# was submitted logs "-" for each.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my @VARS = qw(request_id model prompt_tokens completion_tokens ttft
              finish_reason cached_tokens queue_time);
my $BLOCK = 16;     # the engine's default block size

my $format = join '|', '$request_uri', '$status', '$request_time',
                       '$sent_http_x_request_id',
                       map { "\$pagedllm_$_" } @VARS;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new(
    http => "    log_format pagedllm '$format';",
    server => '        access_log $PLDIR/vars.log pagedllm;',
);
$t->{server} =~ s/\$PLDIR/$t->{dir}/;
$t->start;

my $log = "$t->{dir}/vars.log";
my $lines_read = 0;

# The next access log line (nginx writes it once the response has gone).
sub next_line {
    my $deadline = time + 10;

    while (time < $deadline) {
        if (open my $fh, '<', $log) {
            my @lines = <$fh>;
            if (@lines > $lines_read) {
                chomp(my $l = $lines[$lines_read++]);
                my %f;
                @f{qw(uri status request_time header), @VARS} =
                    split /\|/, $l, -1;
                return \%f;
            }
        }
        sleep 0.05;
    }

    return {};
}

sub logged_as_response {
    my ($name, $f, $json, $header) = @_;
    my @reasons = map { $_->{finish_reason} }
                  sort { $a->{index} <=> $b->{index} } @{ $json->{choices} };

    is($f->{request_id}, $json->{id}, "$name: the id is the response's");
    is($header, $json->{id}, "$name: X-Request-Id is the response's id");
    is($f->{header}, $json->{id}, "$name: X-Request-Id as sent, logged");
    is($f->{model}, $json->{model}, "$name: the model is the response's");
    is($f->{prompt_tokens}, $json->{usage}{prompt_tokens},
       "$name: prompt_tokens equals usage's");
    is($f->{completion_tokens}, $json->{usage}{completion_tokens},
       "$name: completion_tokens equals usage's");
    is($f->{finish_reason}, join(',', @reasons),
       "$name: finish_reason is each choice's, by index");
    # $request_time counts in nginx's cached clock, whole ms
    ok($f->{ttft} =~ /^\d+\.\d{3}$/ && $f->{ttft} > 0
       && $f->{ttft} <= $f->{request_time} * 1000 + 1,
       "$name: ttft is ms, above 0, within the request's time")
        or diag("ttft $f->{ttft}, request_time $f->{request_time}");
    is($f->{cached_tokens},
       $json->{usage}{prompt_tokens_details}{cached_tokens},
       "$name: cached_tokens equals usage's prompt_tokens_details");
    ok($f->{queue_time} =~ /^\d+\.\d{3}$/
       && $f->{queue_time} <= $f->{ttft},
       "$name: queue_time is ms, before the first token")
        or diag("queue_time $f->{queue_time}, ttft $f->{ttft}");
}

my $r = $t->completion(prompt => 'Hello world', max_tokens => 5,
                       temperature => 0);
is($r->{status}, 200, 'completion: 200');
logged_as_response('completion', next_line(), $r->{json},
                   $r->{headers}{'x-request-id'});
like($r->{json}{id}, qr/^cmpl-/, 'completion: the id is a cmpl- id');

$r = $t->completion(prompt => 'Hello world', max_tokens => 4, n => 2,
                    temperature => 1, seed => 7);
is($r->{status}, 200, 'two choices: 200');
logged_as_response('two choices', next_line(), $r->{json},
                   $r->{headers}{'x-request-id'});

$r = $t->request(POST => '/v1/chat/completions',
                 $J->encode({ messages => [{ role => 'user',
                                             content => 'Hi there' }],
                              max_tokens => 6 }));
is($r->{status}, 200, 'chat: 200');
logged_as_response('chat', next_line(), $r->{json},
                   $r->{headers}{'x-request-id'});
like($r->{json}{id}, qr/^chatcmpl-/, 'chat: the id is a chatcmpl- id');

my $s = $t->stream_start('/v1/completions', $J->encode({
    prompt => 'Once upon a time', max_tokens => 7, stream => JSON::PP::true,
    stream_options => { include_usage => JSON::PP::true } }));
is($s->{status}, 200, 'streamed: 200');
my $c = PagedLLM::Test::read_chunks([$s], time + 60)->[0];
close $s->{sock};
my ($ev) = PagedLLM::Test::sse_events($c->{chunks});
my @events = map { $J->decode($_->{data}) }
             grep { $_->{data} ne '[DONE]' } @$ev;
my ($usage) = map { $_->{usage} } grep { $_->{usage} } @events;
my ($last) = grep { defined $_->{choices}[0]{finish_reason} }
             grep { @{ $_->{choices} } } @events;
ok($usage && $last, 'streamed: a usage event and a finish_reason');
logged_as_response('streamed', next_line(),
                   { id => $events[0]{id}, model => $events[0]{model},
                     usage => $usage, choices => $last->{choices} },
                   $s->{headers}{'x-request-id'});
ok(!grep({ $_->{id} ne $events[0]{id} } @events),
   'streamed: every event has the id logged');

# A long prompt twice: the second finds its full blocks in the prefix
# cache (all but the last token's block, which must be computed).
my $long = join ' ', map { "word$_" } 1 .. 60;
my $first = $t->completion(prompt => $long, max_tokens => 2, temperature => 0);
is($first->{status}, 200, 'long prompt: 200');
my $f1 = next_line();
logged_as_response('long prompt', $f1, $first->{json},
                   $first->{headers}{'x-request-id'});
my $n = $first->{json}{usage}{prompt_tokens};
ok($n > 3 * $BLOCK, "long prompt: $n tokens, more than three blocks");
is($f1->{cached_tokens}, 0, 'long prompt, first time: nothing cached');

$r = $t->completion(prompt => $long, max_tokens => 2, temperature => 0);
is($r->{status}, 200, 'long prompt again: 200');
my $f2 = next_line();
logged_as_response('long prompt again', $f2, $r->{json},
                   $r->{headers}{'x-request-id'});
my $cached = $r->{json}{usage}{prompt_tokens_details}{cached_tokens};
ok($cached > 0 && $cached < $n && $cached % $BLOCK == 0
   && $cached >= $n - 2 * $BLOCK,
   'long prompt again: its full blocks but the last come from the cache')
    or diag("cached $cached of $n");
is($r->{json}{choices}[0]{text}, $first->{json}{choices}[0]{text},
   'long prompt again: the same greedy text from cached blocks');

$r = $t->completion(prompt => 'Hello', max_tokens => -1);
is($r->{status}, 400, 'bad max_tokens: 400');
my $f = next_line();
is($f->{status}, 400, 'refused: its line logs 400');
is(join('|', map { $f->{$_} } @VARS), join('|', ('-') x @VARS),
   'refused: every variable is "-"');
is($f->{header}, '-', 'refused: no X-Request-Id');

$r = $t->request(POST => '/v1/tokenize', $J->encode({ prompt => 'Hi' }));
is($r->{status}, 200, 'tokenize: 200');
$f = next_line();
is(join('|', map { $f->{$_} } @VARS), join('|', ('-') x @VARS),
   'tokenize, not a completion: every variable is "-"');

$t->finish;
done_testing;
