#!/usr/bin/perl
# pagedllm_metrics: Prometheus text format 0.0.4 with every engine counter
# of pl_stats_t, the KV usage and prefix-cache hit ratios computed from
# them, and the API's responses by status class and client aborts
# counted across all workers (t/57-histograms.t checks the histograms).  The status JSON carries the same engine
# counters.  A detached worker still answers 200, with
# pagedllm_engine_attached 0 and no engine series.  A small KV pool with
# swap preemption makes the preemption and swap counters move.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $t = PagedLLM::Test->new(
    workers => 2,
    engine_args => ['--num-blocks', '10', '--preemption-mode', 'swap',
                    '--swap-space', '4'],
    server => "        location = /metrics { pagedllm_metrics; }\n",
)->start;

# name{labels} => value, checking the exposition format line by line
sub scrape {
    my $r = $t->request(GET => '/metrics');
    my (%v, %type, %help, @bad);
    for my $line (split /\n/, $r->{body} // '') {
        if ($line =~ /^# HELP (\w+) \S/) {
            $help{$1} = 1;
        } elsif ($line =~ /^# TYPE (\w+) (gauge|counter|histogram)$/) {
            $type{$1} = $2;
        } elsif ($line =~ /^((\w+)(\{\w+="(?:[^"\\]|\\.)*"(?:,\w+="(?:[^"\\]|\\.)*")*\})?) (\d+(?:\.\d+)?)$/) {
            my ($series, $name, $value) = ($1, $2, $4);
            my $family = $name;
            $family =~ s/_(?:bucket|sum|count)$// unless $type{$name};
            push @bad, "$name: sample before its HELP and TYPE"
                unless $help{$family} && $type{$family};
            push @bad, "$name: a counter not named _total"
                if ($type{$name} // '') eq 'counter' && $name !~ /_total$/;
            push @bad, "$series: twice" if exists $v{$series};
            $v{$series} = $value;
        } else {
            push @bad, "bad line '$line'";
        }
    }
    return { status => $r->{status}, type => $r->{headers}{'content-type'},
             v => \%v, bad => \@bad, body => $r->{body} };
}

sub wait_metrics {
    my ($cond, $timeout) = @_;
    my $deadline = time + PagedLLM::Test::scaled($timeout // 5);
    my $m;
    while (1) {
        $m = scrape();
        return $m if $cond->($m->{v}) || time > $deadline;
        sleep 0.05;
    }
}

my $m = wait_metrics(sub { ($_[0]{pagedllm_engine_attached} // 0) == 1 }, 10);
is($m->{status}, 200, 'metrics: 200');
like($m->{type}, qr{^text/plain; version=0\.0\.4}, 'metrics: 0.0.4 content type');
is_deeply($m->{bad}, [], 'metrics: every line well-formed, HELP and TYPE first')
    or diag(join "\n", @{ $m->{bad} });
my $v = $m->{v};
is($v->{pagedllm_engine_attached}, 1, 'engine attached: 1');
is($v->{'pagedllm_model_info{model="tiny",device="cpu"}'}, 1, 'model info');
is($v->{pagedllm_kv_blocks_capacity}, 10, 'KV capacity: --num-blocks 10');
is($v->{'pagedllm_kv_blocks{state="used"}'} + $v->{'pagedllm_kv_blocks{state="free"}'},
   10, 'used + free blocks = capacity');
is($v->{pagedllm_kv_cache_usage_ratio}, '0.000000', 'KV usage ratio: idle, 0');
is($v->{pagedllm_prefix_cache_hit_ratio}, '0.000000',
   'prefix cache hit ratio: no lookups yet, 0');
is($v->{pagedllm_kv_block_size}, 16, 'block size 16');
ok($v->{pagedllm_swap_blocks_capacity} > 0, 'a host pool for swapping');
for my $s (qw(pagedllm_workers pagedllm_requests_running
              pagedllm_requests_waiting pagedllm_requests_swapped
              pagedllm_kv_blocks{state="cached"} pagedllm_swap_blocks_used
              pagedllm_iterations_total pagedllm_requests_total
              pagedllm_prompt_tokens_total pagedllm_generation_tokens_total
              pagedllm_preemptions_total{mode="recompute"}
              pagedllm_preemptions_total{mode="swap"}
              pagedllm_preemption_auto_choices_total{choice="recompute"}
              pagedllm_preemption_auto_choices_total{choice="swap"}
              pagedllm_preemption_swap_full_total
              pagedllm_prefix_cache_queries_total
              pagedllm_prefix_cache_hits_total
              pagedllm_swapped_blocks_total{direction="out"}
              pagedllm_swapped_blocks_total{direction="in"}
              pagedllm_client_aborts_total))
{
    ok(defined $v->{$s}, "$s reported");
}
is($v->{"pagedllm_http_responses_total{code=\"${_}xx\"}"}, 0,
   "no ${_}xx responses yet") for 1 .. 5;

# HTTP outcomes: one 200, a 400, a 404 and a client that leaves mid-stream
my $r = $t->completion(prompt => 'count me', max_tokens => 5,
                       ignore_eos => JSON::PP::true);
is($r->{status}, 200, 'a completion');
is($t->request(POST => '/v1/completions', '{"prompt":')->{status}, 400,
   'a bad body: 400');
is($t->request(GET => '/v1/nothing')->{status}, 404, 'an unknown path: 404');

# A client that leaves after its first event.  The tiny model can finish
# the whole stream before nginx sees the client go on a loaded machine; such
# a try ends as a plain 200, and the client leaves again, up to 5 times,
# until one is caught mid-stream.  The counts below are exact for any number
# of tries: every try is a 2xx, exactly one is an abort.
my ($tries, $aborts) = (0, 0);
while ($aborts == 0 && $tries < 5) {
    $tries++;
    my $s = $t->stream_start('/v1/completions', encode_json({
        prompt => 'leave early', max_tokens => 150,
        ignore_eos => JSON::PP::true, stream => JSON::PP::true }));
    PagedLLM::Test::read_chunks([$s], time + 30, 1);
    close $s->{sock};
    $m = wait_metrics(sub { $_[0]{'pagedllm_http_responses_total{code="2xx"}'}
                            + $_[0]{'pagedllm_http_responses_total{code="4xx"}'}
                            >= 3 + $tries });
    $aborts = $m->{v}{pagedllm_client_aborts_total} // 0;
}
$v = $m->{v};
is($v->{'pagedllm_http_responses_total{code="2xx"}'}, 1 + $tries,
   "2xx: the completion and the $tries abandoned stream(s), counted by both "
   . 'workers');
is($v->{'pagedllm_http_responses_total{code="4xx"}'}, 2, '4xx: 400 and 404');
is($v->{'pagedllm_http_responses_total{code="5xx"}'}, 0, '5xx: none');
is($v->{pagedllm_client_aborts_total}, 1,
   "one client abort (caught mid-stream on try $tries)");

# the same long prompt twice: the second finds its full blocks cached
my $long = join ' ', ('the block table maps each logical block') x 6;
my $before = wait_metrics(sub {
    $_[0]{'pagedllm_kv_blocks{state="used"}'} == 0 })->{v};
for (1, 2) {
    $r = $t->completion(prompt => $long, max_tokens => 1);
    is($r->{status}, 200, "long prompt, pass $_");
}
$m = wait_metrics(sub { $_[0]{pagedllm_prefix_cache_hits_total}
                        > $before->{pagedllm_prefix_cache_hits_total} });
ok($m->{v}{pagedllm_prefix_cache_queries_total}
   > $before->{pagedllm_prefix_cache_queries_total}, 'prefix cache queried');
ok($m->{v}{pagedllm_prefix_cache_hits_total}
   > $before->{pagedllm_prefix_cache_hits_total}, 'prefix cache hit');
ok($m->{v}{'pagedllm_kv_blocks{state="cached"}'} > 0, 'cached blocks');
ok(abs($m->{v}{pagedllm_prefix_cache_hit_ratio}
       - $m->{v}{pagedllm_prefix_cache_hits_total}
         / $m->{v}{pagedllm_prefix_cache_queries_total}) < 1e-5,
   'prefix cache hit ratio: hits over queries');

# four long generations on 10 blocks: the newest are swapped out and back
my @st = map {
    $t->stream_start('/v1/completions', encode_json({
        prompt => "stream $_", max_tokens => 100, temperature => 0,
        ignore_eos => JSON::PP::true, stream => JSON::PP::true }))
} 1 .. 4;
$m = wait_metrics(sub { $_[0]{'pagedllm_kv_blocks{state="used"}'} > 0 }, 30);
my $used = $m->{v}{'pagedllm_kv_blocks{state="used"}'};
is($m->{v}{pagedllm_kv_cache_usage_ratio}, sprintf('%.6f', $used / 10),
   "KV usage ratio while generating: $used of 10 blocks");
my $res = PagedLLM::Test::read_chunks(\@st, time + 60);
is(scalar(grep { $_->{complete} && !$_->{error} } @$res), 4,
   'four streams complete under preemption');
close $_->{sock} for @st;

$m = wait_metrics(sub { $_[0]{'pagedllm_kv_blocks{state="used"}'} == 0
                        && $_[0]{pagedllm_swap_blocks_used} == 0
                        && $_[0]{'pagedllm_http_responses_total{code="2xx"}'}
                           >= 8 });
$v = $m->{v};
ok($v->{'pagedllm_preemptions_total{mode="swap"}'} > 0, 'swap preemptions');
ok($v->{'pagedllm_swapped_blocks_total{direction="out"}'} > 0,
   'blocks swapped out');
is($v->{'pagedllm_swapped_blocks_total{direction="in"}'},
   $v->{'pagedllm_swapped_blocks_total{direction="out"}'},
   'every block swapped out came back in');
is($v->{'pagedllm_kv_blocks{state="used"}'}, 0, 'no KV block leaked');
is($v->{pagedllm_swap_blocks_used}, 0, 'no host block leaked');
is($v->{'pagedllm_http_responses_total{code="2xx"}'}, 7 + $tries,
   '2xx: ' . (7 + $tries) . ' in all');

# the status JSON reports the same engine counters (the engine is idle)
my $j = $t->status->{json};
is_deeply(
    [ $j->{kv_blocks}{used}, $j->{kv_blocks}{free}, $j->{kv_blocks}{cached},
      $j->{swap_blocks}{total}, $j->{swap_blocks}{used},
      $j->{prefix_cache}{queries}, $j->{prefix_cache}{hits},
      $j->{preemptions}{recompute}, $j->{preemptions}{swap},
      $j->{preemptions}{auto_recompute}, $j->{preemptions}{auto_swap},
      $j->{preemptions}{swap_full}, $j->{blocks_swapped}{out}, $j->{blocks_swapped}{in},
      $j->{requests_total}, $j->{generation_tokens_total} ],
    [ map { $v->{$_} } 'pagedllm_kv_blocks{state="used"}',
      'pagedllm_kv_blocks{state="free"}', 'pagedllm_kv_blocks{state="cached"}',
      'pagedllm_swap_blocks_capacity', 'pagedllm_swap_blocks_used',
      'pagedllm_prefix_cache_queries_total', 'pagedllm_prefix_cache_hits_total',
      'pagedllm_preemptions_total{mode="recompute"}',
      'pagedllm_preemptions_total{mode="swap"}',
      'pagedllm_preemption_auto_choices_total{choice="recompute"}',
      'pagedllm_preemption_auto_choices_total{choice="swap"}',
      'pagedllm_preemption_swap_full_total',
      'pagedllm_swapped_blocks_total{direction="out"}',
      'pagedllm_swapped_blocks_total{direction="in"}',
      'pagedllm_requests_total', 'pagedllm_generation_tokens_total' ],
    'status JSON: every counter, equal to the metrics');
is($j->{preemptions_total},
   $j->{preemptions}{recompute} + $j->{preemptions}{swap},
   'status JSON: preemptions_total is the sum of the modes');

is($t->request(POST => '/metrics', '{}')->{status}, 405, 'POST /metrics: 405');
is($t->request(HEAD => '/metrics')->{status}, 200, 'HEAD /metrics: 200');

# a reload keeps the HTTP counters (the shared zone is reused)
kill 'HUP', $t->{pids}{nginx};
my $deadline = time + PagedLLM::Test::scaled(10);
sleep 0.05 until (() = $t->error_log =~ /worker process \d+ exited with code 0/g)
                 >= 2 || time > $deadline;
ok((() = $t->error_log =~ /worker process \d+ exited with code 0/g) >= 2,
   'reload: the old workers exited');
$m = wait_metrics(sub { ($_[0]{pagedllm_engine_attached} // 0) == 1 }, 10);
is($m->{v}{'pagedllm_http_responses_total{code="2xx"}'}, 7 + $tries,
   'after a reload: the new workers report the same counts');

# engine gone: still 200, attached 0, no engine series, HTTP counters kept
$t->stop_engine;
$m = wait_metrics(sub { ($_[0]{pagedllm_engine_attached} // 1) == 0 });
is($m->{status}, 200, 'detached: metrics still 200');
is($m->{v}{pagedllm_engine_attached}, 0, 'detached: engine_attached 0');
is_deeply($m->{bad}, [], 'detached: well-formed');
ok(!grep({ /^pagedllm_(kv|model|requests_total)/ } keys %{ $m->{v} }),
   'detached: no engine series');
is($m->{v}{'pagedllm_http_responses_total{code="2xx"}'}, 7 + $tries,
   'detached: HTTP counters kept');

$t->finish;
done_testing;
