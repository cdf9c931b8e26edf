#!/usr/bin/perl
# bench/pagedllm-load against the real engine and nginx: a short Poisson
# run at a small rate writes one JSON line whose counts add up and agree
# with the server's own counters (requests, prompt and generated tokens),
# with the running and KV means read from /metrics; parallel sampling and
# multi-turn chat and beam search runs; a request the server refuses is
# reported, without a crash; the command line documents every flag.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use IPC::Open3;
use JSON::PP;
use Symbol qw(gensym);
use Test::More;

use PagedLLM::Test;

my $root = abs_path(dirname(__FILE__) . '/..');
my $load = "$ENV{PAGEDLLM_BUILD}/bench/pagedllm-load";
my $t = PagedLLM::Test->new(
    server => "        location = /metrics { pagedllm_metrics; }\n",
)->start;

# runs pagedllm-load; returns (exit status, stdout lines, stderr)
sub load {
    my @args = @_;
    my $err = gensym;
    my $pid = open3(my $in, my $out, $err, $load, @args);
    close $in;
    my @lines = <$out>;
    my $stderr = join '', <$err>;
    waitpid($pid, 0);
    return ($? >> 8, \@lines, $stderr);
}

sub metrics {
    my %v;
    for (split /\n/, $t->request(GET => '/metrics')->{body} // '') {
        $v{$1} = $2 if /^(\S+) (\d+)$/;
    }
    return \%v;
}

sub counts_add_up {
    my ($r, $sent, $what) = @_;
    is($r->{requests}, $sent, "$what: $sent requests sent");
    is($r->{ok}, $sent, "$what: ok == requests sent");
    is($r->{failed}, 0, "$what: none failed");
    is_deeply($r->{errors}, {}, "$what: no errors");
    ok($r->{duration_s} > 0, "$what: a duration");
    ok(abs($r->{request_rate} - $r->{ok} / $r->{duration_s}) < 1e-3
       * $r->{request_rate}, "$what: achieved rate = ok / duration");
    ok(abs($r->{output_tokens_per_s} - $r->{output_tokens} / $r->{duration_s})
       < 1e-3 * $r->{output_tokens_per_s}, "$what: output tokens/s");
    ok(abs($r->{total_tokens_per_s} - ($r->{output_tokens}
                                       + $r->{prompt_tokens})
                                      / $r->{duration_s})
       < 1e-3 * $r->{total_tokens_per_s}, "$what: total tokens/s");
    for (qw(ttft_p50_ms ttft_p90_ms ttft_p99_ms tpot_p50_ms tpot_p99_ms
            latency_p50_s latency_p99_s norm_latency_mean_s
            norm_latency_p50_s norm_latency_p99_s))
    {
        ok(defined $r->{$_} && $r->{$_} >= 0, "$what: $_ reported");
    }
    ok($r->{ttft_p50_ms} <= $r->{ttft_p90_ms}
       && $r->{ttft_p90_ms} <= $r->{ttft_p99_ms}, "$what: TTFT p50 <= p90 "
       . '<= p99');
    ok($r->{latency_p50_s} <= $r->{latency_p99_s}, "$what: latency p50 <= p99");
}

# ---- a Poisson run, its counts against the server's ----------------------
my $before = metrics();
my ($rc, $lines, $err) = load('-p', $t->port, '--dist', 'alpaca',
                              '--rate', '8', '-n', '10', '--seed', '3');
is($rc, 0, 'poisson run: exit 0') or diag($err);
is(scalar @$lines, 1, 'one rate: one JSON line');
my $r = eval { decode_json($lines->[0] // '') };
ok($r, 'the line is JSON') or diag($lines->[0]);
$r //= {};
my $after = metrics();

is($r->{mode}, 'poisson', 'mode poisson');
is($r->{offered_rate}, 8, 'offered rate 8/s');
is($r->{dataset}, 'alpaca', 'alpaca lengths');
counts_add_up($r, 10, 'poisson');
is($r->{prompt_tokens}, $after->{pagedllm_prompt_tokens_total}
   - $before->{pagedllm_prompt_tokens_total},
   'prompt tokens: what the engine counted');
is($r->{output_tokens}, $after->{pagedllm_generation_tokens_total}
   - $before->{pagedllm_generation_tokens_total},
   'output tokens: what the engine generated');
is($after->{'pagedllm_http_responses_total{code="2xx"}'}
   - $before->{'pagedllm_http_responses_total{code="2xx"}'} - 1, 10,
   'the server answered 10 requests with 2xx (and one GET /v1/models)');
ok($r->{metrics_samples} >= 1, "metrics read $r->{metrics_samples} times");
ok(defined $r->{running_mean} && $r->{running_mean} >= 0
   && $r->{running_mean} <= 10, "running mean $r->{running_mean}");
ok(defined $r->{kv_usage_mean} && $r->{kv_usage_mean} >= 0
   && $r->{kv_usage_mean} <= 1, "KV usage mean $r->{kv_usage_mean}");

# the same seed twice: the same requests
my ($rc2, $lines2) = load('-p', $t->port, '--dist', 'alpaca', '--rate',
                          '8', '-n', '10', '--seed', '3',
                          '--metrics-url', 'none');
my $r2 = eval { decode_json($lines2->[0] // '') } // {};
is_deeply([ $r2->{prompt_tokens}, $r2->{output_tokens} ],
          [ $r->{prompt_tokens}, $r->{output_tokens} ],
          'the same seed: the same prompt and output tokens');
ok(!defined $r2->{running_mean} && $r2->{metrics_samples} == 0,
   '--metrics-url none: no metrics');

# ---- two rates, parallel sampling, shared prefix ---------------------------
($rc, $lines, $err) = load('-p', $t->port, '-P', '12', '-G', '6', '--n', '3',
                           '--rate', '20,inf', '-n', '4',
                           '--shared-prefix', '1shot');
is($rc, 0, 'two rates: exit 0') or diag($err);
is(scalar @$lines, 2, 'two rates: two lines');
my @r = map { eval { decode_json($_) } // {} } @$lines;
is_deeply([ map { $_->{mode} } @r ], [ 'poisson', 'burst' ],
          'the rates in order; inf: all at once');
for (@r) {
    counts_add_up($_, 4, "n=3 $_->{mode}");
    is($_->{output_tokens}, 4 * 3 * 6, "$_->{mode}: 4 requests x 3 "
       . 'sequences x 6 tokens');
    is($_->{prompt_tokens}, 4 * (80 + 12), "$_->{mode}: 80 prefix + 12 "
       . 'prompt tokens each');
}

# ---- chat: the history grows ----------------------------------------------
($rc, $lines, $err) = load('-p', $t->port, '--dist', 'alpaca',
                           '--chat-turns', '3', '-n', '2', '--rate', '10',
                           '--seed', '5');
is($rc, 0, 'chat: exit 0') or diag($err);
$r = eval { decode_json($lines->[0] // '') } // {};
is($r->{chat_turns}, 3, 'chat: 3 turns');
counts_add_up($r, 6, 'chat');

# ---- beam search runs; a width the server refuses is reported ------------
($rc, $lines, $err) = load('-p', $t->port, '-P', '8', '-G', '4',
                           '--beam-width', '2', '-n', '3', '--rate', 'inf');
$r = eval { decode_json($lines->[0] // '') } // {};
is(scalar @$lines, 1, 'beam search: one JSON line');
is($r->{requests}, 3, 'beam search: 3 requests');
is($rc, 0, 'beam search: exit 0');
counts_add_up($r, 3, 'beam');

($rc, $lines, $err) = load('-p', $t->port, '-P', '8', '-G', '4',
                           '--beam-width', '17', '-n', '3', '--rate', 'inf');
$r = eval { decode_json($lines->[0] // '') } // {};
is($rc, 1, 'a beam width over the limit: exit 1');
is_deeply($r->{errors}, { 'HTTP 400' => 3 }, 'three HTTP 400s');
like($r->{first_error}, qr/^HTTP 400: .*(best_of|\bn\b)/,
     'the first error names the parameter');
like($err, qr/^pagedllm-load: 3 of 3 requests failed; the first: HTTP 400/m,
     'stderr says so in one line');
ok(!defined $r->{latency_p50_s}, 'no latency figures without an ok request');

# ---- the command line ------------------------------------------------------
($rc, $lines) = load('--help');
is($rc, 0, '--help: exit 0');
my $help = join '', @$lines;
open my $src, '<', "$root/bench/load/cli.c" or die $!;
my @flags = map { /^\s*\{ "([a-z-]+)", (?:required|no)_argument/ ? $1 : () }
            <$src>;
ok(@flags > 20, scalar(@flags) . ' long options in the source');
is_deeply([ grep { $help !~ /--\Q$_\E\b/ } @flags ], [],
          '--help documents every long option');
($rc, $lines) = load('--version');
like($lines->[0] // '', qr/^pagedllm-load \d+\.\d+\.\d+$/,
     '--version: one line');
($rc, $lines, $err) = load('--no-such-flag');
is($rc, 2, 'an unknown flag: exit 2');
is($err, "pagedllm-load: unknown option '--no-such-flag'; "
        . "try 'pagedllm-load --help'\n",
   'an unknown flag: one line and the hint');

($rc, $lines, $err) = load('-p', $t->port, '--rate', 'fast');
is($rc, 2, 'a bad rate: exit 2');
like($err, qr/--rate: 'fast' is not a positive rate or inf/,
     'a bad rate: said so');

$t->finish;
done_testing;
