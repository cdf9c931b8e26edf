#!/usr/bin/perl
# The two-tier deployment of docs/DEPLOYMENT.md on loopback: a front nginx
# (t/fixtures/deploy/front.conf: pagedllm_route_only, an upstream hashed
# on $pagedllm_prefix_hash, proxy_buffering off) over two serving nginx +
# engine instances (serving.conf).  The document shows the files the test
# runs; the front's prefix hash is the serving tier's and is FNV-1a of the
# first K ids of the prompt; a stream reaches the client through both
# tiers event by event while the engine still generates; every request
# with one system prompt lands on one instance, and the prompts spread
# over both; a body too long to parse routes by its first bytes; an
# instance whose engine is down (503), then whose nginx is down (refused),
# is skipped and its requests served by the other.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Math::BigInt;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Deploy;

my $J = $PagedLLM::Test::JSON;

my %doc = (front => PagedLLM::Deploy::fixture('front.conf'),
           serving => PagedLLM::Deploy::fixture('serving.conf'));
my ($K) = $doc{front} =~ /^pagedllm_prefix_hash_tokens (\d+);/m;
ok($K, "front.conf sets pagedllm_prefix_hash_tokens ($K)");

my $deployment = PagedLLM::Deploy::slurp('docs/DEPLOYMENT.md');
for my $name (sort keys %doc) {
    ok(index($deployment, "```nginx\n$doc{$name}```\n") >= 0,
       "docs/DEPLOYMENT.md shows $name.conf as the test runs it");
}

my @serving = map { PagedLLM::Deploy->serving->start } 1 .. 2;
my %instance = map { $_->address => $_ } @serving;
my $front = PagedLLM::Deploy->front(@serving);
$front->start_nginx;

# 64-bit FNV-1a of bytes, the prefix hash's definition
sub fnv1a {
    my ($bytes) = @_;
    my $mask = Math::BigInt->new(2)->bpow(64)->bsub(1);
    my $h = Math::BigInt->from_hex('cbf29ce484222325');
    for my $b (unpack 'C*', $bytes) {
        $h->bxor($b)->bmul(Math::BigInt->from_hex('100000001b3'))
          ->band($mask);
    }
    return sprintf '%016s', substr($h->as_hex, 2);
}

# The prefix hash of ids: their first $K, 4 little-endian bytes each.
sub prefix_hash {
    my @ids = @_;
    splice @ids, $K if @ids > $K;
    return fnv1a(pack 'V*', @ids);
}

# The next $n lines of a front's route log (waiting for them), as
# hashes: prefix, upstream, status.
sub route_lines {
    my ($f, $n) = @_;
    my $deadline = time + 10;
    my @new;
    while (time < $deadline) {
        if (open my $fh, '<', $f->dir . '/logs/route.log') {
            my @all = <$fh>;
            @new = @all[$f->{log_read} // 0 .. $#all];
            last if @new >= ($n // 1);
        }
        sleep 0.05;
    }
    $f->{log_read} += @new;
    return map { /prefix=(\S+) upstream=(.*) upstream_status=(.*)$/
                 ? { prefix => $1, upstream => $2, status => $3 } : {} }
           @new;
}

sub chat_body {
    my ($system, $user, %more) = @_;
    return $J->encode({ messages => [{ role => 'system', content => $system },
                                     { role => 'user', content => $user }],
                        max_tokens => 1, %more });
}

# A system prompt long enough that its rendering fills the first $K ids.
sub system_prompt {
    my ($i) = @_;
    return "Assistant $i of the fleet: " . join ' ',
           map { "rule $_ of assistant $i is to answer briefly." } 1 .. 12;
}

# "STATUS INSTANCE" of a chat with each system prompt through front $f
sub ask_each {
    my ($f, $question, @prompts) = @_;
    return [ map {
        my $r = $f->request(POST => '/v1/chat/completions',
                            chat_body(system_prompt($_), $question));
        "$r->{status} " . ($r->{headers}{'x-served-by'} // '');
    } @prompts ];
}

# ---- the prefix hash -----------------------------------------------------

my $chat = chat_body(system_prompt(1), 'How deep is the sea?');
my $r = $front->request(POST => '/v1/chat/completions', $chat);
is($r->{status}, 200, 'a chat through both tiers: 200');
my ($line) = route_lines($front);
my $tok = $front->request(POST => '/v1/tokenize',
    $J->encode({ messages => $J->decode($chat)->{messages} }));
route_lines($front);
my $want = prefix_hash(@{ $tok->{json}{tokens} });
is($line->{prefix}, $want,
   "the front's \$pagedllm_prefix_hash is FNV-1a of the chat's first $K "
   . 'ids, as rendered and tokenized by the serving tier');
is($r->{headers}{'x-pagedllm-prefix-hash'}, $want,
   'the serving tier hashes the ids it submitted to the same value');
ok(exists $instance{$line->{upstream}}
   && $r->{headers}{'x-served-by'} eq $line->{upstream},
   'the instance the front chose answered');

$r = $front->completion(prompt => 'Once upon a time', max_tokens => 1);
($line) = route_lines($front);
$tok = $front->request(POST => '/v1/tokenize',
                       $J->encode({ prompt => 'Once upon a time' }));
route_lines($front);
is($line->{prefix}, prefix_hash(@{ $tok->{json}{tokens} }),
   'a completion hashes its prompt text tokenized with BOS');
is($r->{headers}{'x-pagedllm-prefix-hash'}, $line->{prefix},
   'the serving tier agrees for a completion');

$r = $front->completion(prompt => [510, 7, 8, 9], max_tokens => 1);
($line) = route_lines($front);
is($line->{prefix}, prefix_hash(510, 7, 8, 9),
   'a prompt of ids hashes those ids');

$r = $front->request(GET => '/v1/models');
($line) = route_lines($front);
is($r->{status}, 200, 'GET /v1/models through the front: 200');
is($line->{prefix}, '-', 'a request with no prompt has no prefix hash');

$r = $front->request(POST => '/v1/completions', '{"prompt": ');
($line) = route_lines($front);
is($r->{status}, 400, 'a body that is not JSON: the serving tier says 400');
is($line->{prefix}, '-', 'and it has no prefix hash');

# a body past client_body_buffer_size (64k) sits in a temp file
my $head = '{"max_tokens":1,"prompt":"' . ('lorem ipsum ' x 400);
my @long = map { $head . ("tail $_ " x 30000) . '"}' } 1 .. 2;
my @sent;
for my $body (@long) {
    $r = $front->request(POST => '/v1/completions', $body);
    push @sent, [route_lines($front)]->[0];
}
like($r->{json}{error}{message},
     qr/maximum context length is 2048 tokens, however your prompt has/,
     'the serving tier got the whole long body after the front read it');
is($sent[0]{prefix}, fnv1a(substr $long[0], 0, 4096),
   'a body in a temp file hashes as FNV-1a of its first 4096 bytes');
ok($sent[0]{prefix} eq $sent[1]{prefix}
   && $sent[0]{upstream} eq $sent[1]{upstream},
   'two long bodies with the same first bytes go to one instance');

# ---- a stream through both tiers ------------------------------------------

my $s = $front->stream_start('/v1/completions', $J->encode({
    prompt => 'Hello', max_tokens => 2000, ignore_eos => JSON::PP::true,
    stream => JSON::PP::true }));
is($s->{status}, 200, 'a stream through both tiers: 200');
is($s->{headers}{'content-type'}, 'text/event-stream',
   'it is an event stream');
my $first = PagedLLM::Test::read_chunks([$s], time + 30, 1)->[0];
my $at = $instance{ $s->{headers}{'x-served-by'} };
my $st = $at->status;
ok(@{ $first->{chunks} } >= 1 && $st->{json}{requests}{running} == 1,
   'its first event reaches the client while the engine still runs it')
    or diag($J->encode($st->{json} // {}));
my $rest = PagedLLM::Test::read_chunks([$s], time + 60)->[0];
close $s->{sock};
my @chunks = (@{ $first->{chunks} }, @{ $rest->{chunks} });
my ($events, $sse_error) = PagedLLM::Test::sse_events(\@chunks);
ok($rest->{complete} && !$rest->{error} && !$sse_error,
   'the stream is whole, chunked and SSE framing intact')
    or diag($rest->{error} // $sse_error);
is($events->[-1]{data}, '[DONE]', 'it ends with [DONE]');
my %reads = map { $_->{time} => 1 } @chunks;
ok(keys %reads >= 10,
   'its events come in many reads, not one buffer (' . keys(%reads)
   . ' reads for ' . @$events . ' events)');
route_lines($front);

# ---- affinity --------------------------------------------------------------

# $by_prompt{PROMPT}{"STATUS INSTANCE"}: how many of its four questions
my (%by_prompt, %used);
for my $q ('Why?', 'How far is the moon?', 'Name a fish.', 'Hello.') {
    my $got = ask_each($front, $q, 1 .. 16);
    $by_prompt{$_ + 1}{ $got->[$_] }++ for 0 .. 15;
}
route_lines($front, 64);
my @split = grep { my @k = keys %{ $by_prompt{$_} };
                   @k != 1 || $k[0] !~ /^200 / } sort keys %by_prompt;
ok(!@split, 'every request with one system prompt is answered 200 by one '
   . 'instance')
    or diag($J->encode(\%by_prompt));
$used{ (split ' ')[1] // '' }++ for map { keys %$_ } values %by_prompt;
is_deeply([sort keys %used], [sort keys %instance],
          'sixteen system prompts spread over both instances');

# ---- failover --------------------------------------------------------------

my ($down) = grep { $used{ $_->address } } @serving;
my ($up) = grep { $_ != $down } @serving;
my @on_down = grep { exists $by_prompt{$_}{ '200 ' . $down->address } }
              sort keys %by_prompt;

$down->stop_engine;
my $deadline = time + 10;
sleep 0.05 while $down->request(GET => '/health')->{status} != 503
                 && time < $deadline;
is($down->request(GET => '/health')->{status}, 503,
   "an instance whose engine stopped answers /health 503");

is_deeply(ask_each($front, 'Still there?', @on_down),
          [ map { '200 ' . $up->address } @on_down ],
          "its prompts are served by the other instance");
my @lines = route_lines($front, scalar @on_down);
is("$lines[0]{upstream} $lines[0]{status}",
   $down->address . ', ' . $up->address . ' 503, 200',
   'the front tried it, took its 503 as a failure and passed the '
   . 'request on');
is(scalar(grep { $_->{upstream} eq $up->address } @lines[1 .. $#lines]),
   $#lines, 'and left it out for the next requests (max_fails=1)');

# a second front, which has seen no failure yet, once the instance's
# nginx is stopped too: its connection is refused
$down->stop('nginx');
my $fresh = PagedLLM::Deploy->front(@serving);
$fresh->start_nginx;
is_deeply(ask_each($fresh, 'And now?', @on_down),
          [ map { '200 ' . $up->address } @on_down ],
          'with its nginx stopped too, the other instance serves them');
@lines = route_lines($fresh, scalar @on_down);
is("$lines[0]{upstream} $lines[0]{status}",
   $down->address . ', ' . $up->address . ' 502, 200',
   'the front tried it, was refused and passed the request on');
like($fresh->error_log, qr/connect\(\) failed \(111: Connection refused\)/,
     'its error log says the connection was refused');
is($fresh->request(GET => '/health')->{status}, 200,
   "the front's /health answers from the instance that is up");

$fresh->finish;
$front->finish;
$_->finish for @serving;
done_testing;
