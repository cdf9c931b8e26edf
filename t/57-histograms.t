#!/usr/bin/perl
# Latency and length histograms in /metrics, and the engine's log lines.
#
# The exposition passes Prometheus' own checker (`promtool check metrics`,
# from Debian's prometheus package, installed by make's test-deps step:
# it parses the text format and lints names, units and HELP) before and
# after traffic, and each histogram follows the conventions promtool does
# not check:
# HELP and TYPE histogram, _bucket{le} cumulative over ascending bounds
# ending at +Inf, _count equal to the +Inf bucket, _sum.  After known
# requests over two workers every histogram counts each of them once, the
# prompt and generation histograms' sums and buckets are the responses'
# usage, and the times agree (time to first token below end-to-end
# latency).  The engine logs one line per finished request (its tokens,
# cached tokens, times, reason, preemptions), a periodic summary while
# busy, and at start its load progress and a memory summary.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my @HIST = qw(pagedllm_time_to_first_token_seconds
              pagedllm_time_per_output_token_seconds
              pagedllm_e2e_request_latency_seconds
              pagedllm_request_queue_time_seconds
              pagedllm_request_prompt_tokens
              pagedllm_request_generation_tokens);

my $t = PagedLLM::Test->new(
    workers => 2,
    engine_args => ['--log-stats-interval', '1'],
    server => "        location = /metrics { pagedllm_metrics; }\n",
)->start;

# promtool's verdict on the text: [exit status, its output]
sub promtool {
    my ($text) = @_;
    my $f = "$t->{dir}/scrape.txt";
    open my $fh, '>', $f or die "$f: $!";
    print $fh $text;
    close $fh;
    my $out = `promtool check metrics < $f 2>&1`;
    return [$? >> 8, $out];
}

# { family => { type, help, samples => [[name, labels, value]] } }, and
# what breaks the conventions
sub parse {
    my ($text) = @_;
    my (%f, @bad, $cur);
    for my $line (split /\n/, $text) {
        if ($line =~ /^# HELP (\w+) (.+)$/) {
            $cur = $1;
            $f{$cur}{help} = $2;
        } elsif ($line =~ /^# TYPE (\w+) (\w+)$/) {
            push @bad, "TYPE of $1 not right after its HELP"
                unless defined $cur && $cur eq $1;
            $f{$1}{type} = $2;
        } elsif ($line =~ /^(\w+)(?:\{(.*)\})? (\S+)$/) {
            my ($name, $labels, $value) = ($1, $2 // '', $3);
            my $fam = $name;
            $fam =~ s/_(?:bucket|sum|count)$//
                if !$f{$name} && defined $cur && $fam ne $cur;
            push @bad, "$name outside its family $cur"
                unless defined $cur && $fam eq $cur;
            push @{ $f{$cur}{samples} }, [$name, $labels, $value];
        } else {
            push @bad, "bad line '$line'";
        }
    }
    return (\%f, \@bad);
}

# a histogram's buckets [[le, cumulative]], sum and count, checking its
# shape; what is wrong goes to $bad
sub histogram {
    my ($f, $name, $bad) = @_;
    my $h = $f->{$name} or return push @$bad, "$name missing";
    push @$bad, "$name: TYPE $h->{type}" unless $h->{type} eq 'histogram';
    my (@b, $sum, $count);
    for my $s (@{ $h->{samples} }) {
        my ($n, $labels, $v) = @$s;
        if ($n eq "${name}_bucket" && $labels =~ /^le="([^"]+)"$/) {
            push @b, [$1, $v];
        } elsif ($n eq "${name}_sum" && $labels eq '') {
            $sum = $v;
        } elsif ($n eq "${name}_count" && $labels eq '') {
            $count = $v;
        } else {
            push @$bad, "$name: unexpected $n\{$labels}";
        }
    }
    push @$bad, "$name: no +Inf bucket last" unless @b && $b[-1][0] eq '+Inf';
    for my $i (1 .. $#b) {
        push @$bad, "$name: bounds not ascending at $b[$i][0]"
            unless $b[$i][0] eq '+Inf' || $b[$i][0] > $b[$i - 1][0];
        push @$bad, "$name: counts not cumulative at $b[$i][0]"
            unless $b[$i][1] >= $b[$i - 1][1];
    }
    push @$bad, "$name: _count is not the +Inf bucket"
        unless defined $count && @b && $count == $b[-1][1];
    push @$bad, "$name: no _sum" unless defined $sum;
    return { buckets => \@b, sum => $sum, count => $count };
}

sub scrape {
    my $r = $t->request(GET => '/metrics');
    my ($f, $bad) = parse($r->{body} // '');
    my %h = map { $_ => histogram($f, $_, $bad) } @HIST;
    return { body => $r->{body}, f => $f, bad => $bad, h => \%h };
}

sub wait_count {
    my ($n) = @_;
    my $deadline = time + 10;
    my $m;
    while (1) {
        $m = scrape();
        return $m if ($m->{h}{pagedllm_e2e_request_latency_seconds}{count}
                      // 0) >= $n || time > $deadline;
        sleep 0.05;
    }
}

my $m = scrape();
is_deeply(promtool($m->{body}), [0, ''], 'no traffic: promtool check clean');
is_deeply($m->{bad}, [], 'no traffic: every histogram well-formed')
    or diag(join "\n", @{ $m->{bad} });
is($m->{h}{$_}{count}, 0, "no traffic: $_ counts 0") for @HIST;

# five known requests: over both workers, one streamed, one chat, one
# with two choices, the long one twice
my $long = join ' ', map { "token$_" } 1 .. 50;
my @usage;
for my $req ({ prompt => 'Hello world', max_tokens => 5 },
             { prompt => 'Two of them', max_tokens => 3, n => 2,
               temperature => 1, seed => 3 },
             { prompt => $long, max_tokens => 2 },
             { prompt => $long, max_tokens => 2 })
{
    my $r = $t->completion(%$req, ignore_eos => JSON::PP::true);
    is($r->{status}, 200, "completion of $req->{max_tokens}: 200");
    push @usage, $r->{json}{usage};
}
my $s = $t->stream_json('/v1/chat/completions',
    messages => [{ role => 'user', content => 'Hi' }], max_tokens => 4,
    ignore_eos => JSON::PP::true,
    stream_options => { include_usage => JSON::PP::true });
ok($s->{done}, 'streamed chat: done');
push @usage, (grep { $_->{usage} } @{ $s->{events} })[0]{usage};
my $n = @usage;

$m = wait_count($n);
is_deeply(promtool($m->{body}), [0, ''], 'after traffic: promtool check clean');
is_deeply($m->{bad}, [], 'after traffic: every histogram well-formed')
    or diag(join "\n", @{ $m->{bad} });
is($m->{h}{$_}{count}, $n, "$_: each of the $n requests once") for @HIST;

my $h = $m->{h};
my $sum = sub { my ($k) = @_; my $x = 0; $x += $_->{$k} for @usage; $x };
is($h->{pagedllm_request_prompt_tokens}{sum}, $sum->('prompt_tokens'),
   'prompt tokens: the sum of usage.prompt_tokens');
is($h->{pagedllm_request_generation_tokens}{sum},
   $sum->('completion_tokens'),
   'generation tokens: the sum of usage.completion_tokens');
for my $b (@{ $h->{pagedllm_request_prompt_tokens}{buckets} }) {
    my $want = grep { $b->[0] eq '+Inf' || $_->{prompt_tokens} <= $b->[0] }
               @usage;
    is($b->[1], $want, "prompt tokens le=$b->[0]: $want requests");
}
ok($h->{pagedllm_time_to_first_token_seconds}{sum} > 0,
   'time to first token: above 0');
ok($h->{pagedllm_time_to_first_token_seconds}{sum}
   < $h->{pagedllm_e2e_request_latency_seconds}{sum},
   'time to first token: below the end-to-end latency');
ok($h->{pagedllm_request_queue_time_seconds}{sum}
   <= $h->{pagedllm_time_to_first_token_seconds}{sum},
   'queue time: within the time to first token');
ok($h->{pagedllm_time_per_output_token_seconds}{sum} > 0,
   'time per output token: above 0');

my $v = { map { $_->[0] => $_->[2] }
          map { @{ $_->{samples} } } values %{ $m->{f} } };
ok($v->{pagedllm_prefix_cache_hit_ratio} > 0
   && $v->{pagedllm_prefix_cache_hit_ratio} <= 1,
   'prefix cache hit ratio: the long prompt hit, within (0, 1]');
ok($v->{pagedllm_kv_cache_usage_ratio} >= 0
   && $v->{pagedllm_kv_cache_usage_ratio} <= 1,
   'KV cache usage ratio: within [0, 1]');

# the engine's log
my $deadline = time + 5;
my $log = '';
while (time < $deadline) {
    open my $fh, '<', "$t->{dir}/engine.log" or last;
    $log = do { local $/; <$fh> };
    last if $log =~ /throughput: /;
    sleep 0.1;
}
my @lines = $log =~ /^.*\[info\] request \d+:\d+ finished: .*$/mg;
is(scalar @lines, $n, "engine log: one line per finished request ($n)");
my %seen;
for my $l (@lines) {
    my ($reason, $p, $c, $g, $q, $ttft, $total, $pre) = $l =~ qr{
        finished:\ (\w+),\ prompt\ (\d+)\ tokens\ \((\d+)\ cached\),
        \ generated\ (\d+)\ in\ \d+\ sequences,\ queue\ ([\d.]+)\ ms,
        \ ttft\ ([\d.]+)\ ms,\ total\ ([\d.]+)\ ms,\ preemptions\ (\d+)$}x
        or do { fail("engine log: '$l' has every field"); next };
    $seen{"$p/$g"}++;
    ok($ttft <= $total && $q <= $ttft,
       "engine log: queue <= ttft <= total ($q, $ttft, $total)");
    is($reason, 'length', 'engine log: the reason (ignore_eos: length)');
    is($pre, 0, 'engine log: no preemptions');
}
my %want;
$want{"$_->{prompt_tokens}/$_->{completion_tokens}"}++ for @usage;
is_deeply(\%seen, \%want,
          'engine log: prompt and generated tokens are the responses\'');
my @cached = map { /\((\d+) cached\)/ ? $1 : () } @lines;
is(scalar(grep { $_ > 0 } @cached), 1,
   'engine log: the long prompt sent again had cached tokens');
my $summary = '\[info\] throughput: prompt [\d.]+ tokens/s, generation'
    . ' [\d.]+ tokens/s; requests running \d+, waiting \d+, swapped \d+;'
    . ' KV usage [\d.]+% \(\d+ of \d+ blocks\); prefix cache hit rate'
    . ' [\d.]+%';
like($log, qr/$summary/,
     'engine log: a periodic summary while busy');
like($log, qr/\[info\] loading weights: 2 of 2 layers, [\d.]+ MiB/,
     'engine log: model load progress');
my $memory = '\[info\] memory: weights [\d.]+ MiB, activations [\d.]+ MiB'
    . ' \(batches up to \d+ tokens\), KV cache [\d.]+ MiB = \d+ tokens;'
    . ' [\d.]+ MiB in all';
like($log, qr/$memory/,
     'engine log: a memory summary at start');

$t->finish;
done_testing;
