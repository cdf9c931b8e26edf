#!/usr/bin/perl
# The same request streamed and not gives a client the same answer, in the
# shapes where the two are made differently.
#
# Beam search: the search runs to its end, then the answer is streamed as
# vLLM streams it: text/event-stream, for each returned choice one chunk
# of its whole text with its index, logprobs null and finish_reason (on
# chat after the choice's role chunk), the usage chunk when
# stream_options asks for it, then [DONE]; the texts, finish_reasons and
# usage are the JSON response's, on /v1/completions and
# /v1/chat/completions, and the official openai npm client reads the
# chunks (t/node/stream-shapes-client.mjs).
#
# A forced tool call cut by max_tokens: answered whole, its tool_calls are
# the calls written so far (the cut one with its name and its arguments
# as far as they go), content null, finish_reason "length": what the
# stream of the same seeded request delivers, at cuts before, inside and
# after a call.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(abs_path);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $root = $ENV{PAGEDLLM_ROOT} // '.';
my $t = PagedLLM::Test->new->start;

# A stream's events reduced to what a client assembles: per choice index
# its text (chat: the deltas' content), finish_reason and calls; the
# chunks each choice came in; the usage chunk; and the shape problems
# found: an event that is not a chunk of the endpoint's object, a choice
# without its keys, a chunk after the usage.
sub assemble {
    my ($s, $chat) = @_;
    my $object = $chat ? 'chat.completion.chunk' : 'text_completion';
    my %a = (choices => {}, usage => undef, problems => []);
    for my $e (@{ $s->{events} }) {
        push @{ $a{problems} }, "after the usage: " . $J->encode($e)
            if $a{usage};
        push @{ $a{problems} }, "object: " . $J->encode($e)
            unless ($e->{object} // '') eq $object && $e->{id}
                   && $e->{model} && $e->{created};
        if (@{ $e->{choices} // [] } == 0) {
            $a{usage} = $e->{usage};
            next;
        }
        for my $c (@{ $e->{choices} }) {
            push @{ $a{problems} }, "choice keys: " . $J->encode($c)
                unless defined $c->{index} && exists $c->{logprobs}
                       && exists $c->{finish_reason}
                       && ($chat ? ref $c->{delta} eq 'HASH'
                                 : defined $c->{text});
            my $x = $a{choices}{ $c->{index} } //=
                { text => '', finish => undef, calls => [], chunks => [] };
            push @{ $x->{chunks} }, $c;
            $x->{text} .= $chat ? $c->{delta}{content} // '' : $c->{text};
            $x->{finish} = $c->{finish_reason} if $c->{finish_reason};
            for my $d (@{ $chat ? $c->{delta}{tool_calls} // [] : [] }) {
                my $call = $x->{calls}[ $d->{index} ] //=
                    { id => $d->{id}, name => $d->{function}{name},
                      arguments => '' };
                $call->{arguments} .= $d->{function}{arguments} // '';
            }
        }
    }
    return \%a;
}

# ---- beam search -----------------------------------------------------------------

my %beam = (use_beam_search => $T, n => 2, max_tokens => 12,
            ignore_eos => $T);

for my $ep (['/v1/completions', 0, prompt => 'Search wide', best_of => 4],
            ['/v1/chat/completions', 1,
             messages => [{ role => 'user', content => 'Search wide' }]])
{
    my ($path, $chat, @req) = @$ep;
    my $name = $chat ? 'chat' : 'completions';
    my $whole = $t->json_ok($t->request(POST => $path,
                                        $J->encode({ %beam, @req })),
                            "$name: beam search answered whole");
    my @want = @{ $whole->{choices} // [] };
    my $text = sub { $chat ? $_[0]{message}{content} : $_[0]{text} };

    my $s = $t->stream_json($path, %beam, @req,
                            stream_options => { include_usage => $T });
    is($s->{status}, 200, "$name: beam search streamed: 200");
    like($s->{headers}{'content-type'} // '', qr{^text/event-stream},
         "$name: as text/event-stream");
    ok(!$s->{error} && $s->{done},
       "$name: SSE events to data: [DONE], nothing else")
        or diag($s->{error});

    my $a = assemble($s, $chat);
    is_deeply($a->{problems}, [], "$name: every event a valid chunk");
    is_deeply([ sort keys %{ $a->{choices} } ], [ 0, 1 ],
              "$name: choices 0 and 1");
    my @got = map { $a->{choices}{$_} // { chunks => [] } } 0, 1;
    is_deeply([ map { $_->{text} } @got ], [ map { $text->($_) } @want ],
              "$name: each choice's text is the JSON response's");
    is_deeply([ map { $_->{finish} } @got ],
              [ map { $_->{finish_reason} } @want ],
              "$name: and so is its finish_reason");
    ok(!grep({ defined $_->{logprobs} } map { @{ $_->{chunks} } } @got),
       "$name: logprobs null, as the JSON response's");
    # the stream's prompt is in the prefix cache by then: the counts that
    # do not depend on it are compared
    my @counts = qw(prompt_tokens completion_tokens total_tokens);
    is_deeply([ @{ $a->{usage} // {} }{@counts} ],
              [ @{ $whole->{usage} }{@counts} ],
              "$name: the usage chunk last, the JSON response's counts");

    # the whole text in one chunk, with its finish_reason; chat names the
    # role first, as every chat stream does
    my @shape = map { [ map { ($chat ? join(',', sort keys %{ $_->{delta} })
                                     : 'text')
                              . ' ' . ($_->{finish_reason} // 'null') }
                        @{ $_->{chunks} } ] } @got;
    my @one = map { [ $chat ? ('content,role null',
                               "content $_->{finish_reason}")
                            : "text $_->{finish_reason}" ] } @want;
    is_deeply(\@shape, \@one,
              "$name: one chunk of the whole text per choice"
              . ($chat ? ', after its role' : ''))
        or diag($J->encode(\@shape));

    $s = $t->stream_json($path, %beam, @req);
    ok(!grep({ !@{ $_->{choices} } || exists $_->{usage} } @{ $s->{events} }),
       "$name: no usage chunk (nor usage key) unless asked for");
}

# ---- a forced tool call cut by max_tokens -----------------------------------------

my %tools = (
    messages => [{ role => 'user', content => 'Weather in Oslo?' }],
    tool_choice => 'required', n => 2, seed => 28,
    tools => [{ type => 'function', function => {
        name => 'get_weather',
        parameters => { type => 'object',
                        properties => { city => { type => 'string',
                                                  maxLength => 8 } },
                        required => ['city'],
                        additionalProperties => JSON::PP::false } } }]);
my %seen;

for my $max (3, 30, 45, 80) {
    my $name = "required, max_tokens $max";
    my $whole = $t->json_ok($t->request(POST => '/v1/chat/completions',
                                        $J->encode({ %tools,
                                                     max_tokens => $max })),
                            "$name: answered whole");
    my $s = $t->stream_json('/v1/chat/completions', %tools,
                            max_tokens => $max);
    ok($s->{status} == 200 && $s->{done}, "$name: streamed");
    my $a = assemble($s, 1);

    for my $i (0, 1) {
        my $c = $whole->{choices}[$i] // {};
        my $m = $c->{message} // {};
        my $x = $a->{choices}{$i} // {};
        my @calls = map { { name => $_->{function}{name},
                            arguments => $_->{function}{arguments} } }
                        @{ $m->{tool_calls} // [] };
        my @streamed = map { { name => $_->{name},
                               arguments => $_->{arguments} } }
                           @{ $x->{calls} // [] };
        is_deeply([ $c->{finish_reason}, \@calls ],
                  [ $x->{finish}, \@streamed ],
                  "$name, choice $i: the same calls and finish_reason "
                  . 'both ways') or diag($J->encode([ $c, $x ]));
        ok(!defined $m->{content} && ($x->{text} // '') eq '',
           "$name, choice $i: no content either way")
            or diag($J->encode($m));
        ok(!grep({ ($_->{id} // '') !~ /^call_[A-Za-z0-9]{24}$/
                   || $_->{type} ne 'function' } @{ $m->{tool_calls} // [] }),
           "$name, choice $i: each call with its id and type");
        next unless ($c->{finish_reason} // '') eq 'length';
        $seen{none} = 1 unless @calls;
        $seen{partial} = 1
            if @calls && !eval { $J->decode($calls[-1]{arguments}); 1 };
        $seen{after} = 1 if @calls > 1;
    }
}
is_deeply(\%seen, { none => 1, partial => 1, after => 1 },
          'the cuts fell before a call, inside its arguments and after one');

# ---- the openai npm client ---------------------------------------------------------

my $node = abs_path("$root/t/node");
my $url = 'http://127.0.0.1:' . $t->port . '/v1';
my $out = `node $node/stream-shapes-client.mjs $node $url 2>&1`;
my $o = eval { $J->decode($out) };
ok($o, 'the openai client ran') or diag($out);
$o //= {};

for my $name ('completions', 'chat') {
    my $got = $o->{"${name}_stream"} // {};
    cmp_ok($got->{chunks} // 0, '>=', 3,
           "openai client, $name: a beam search's stream yields its chunks");
    is_deeply($got->{choices}, $o->{$name},
              "openai client, $name: the texts and finish_reasons of the "
              . 'JSON response');
    ok($got->{usage} && $got->{usage}{completion_tokens} == 24,
       "openai client, $name: and the usage");
}
is_deeply($o->{tools_stream}, $o->{tools},
          'openai client: a forced call cut by max_tokens, the same calls '
          . 'streamed and not') or diag($J->encode($o));
is($o->{tools}{finish}, 'length', 'openai client: cut, finish_reason length');

$t->finish;
done_testing;
