#!/usr/bin/perl
# The playground in a real browser: Debian's chromium, headless, driven by
# playwright-core (t/node/ui-browser.mjs).  Three pages on one engine: the
# page and the API on one origin over HTTP/1.1; the page on another
# origin (a second server block on another loopback port) calling the API
# through CORS; and both over HTTP/2 with TLS (a self-signed certificate,
# which chromium is told to accept).  On each, the model picker fills from
# /v1/models, a long generation streams its text in over many DOM updates
# spread in time, TTFT and tokens/s are shown, the block map shows used
# blocks while it runs (this page's request among the owners) and none
# after it ends, and none after Stop aborts the next one.  The first page
# asks for n = 2 and its screenshots, taken while it runs, go to
# ui-playground.png and ui-blockmap.png in PAGEDLLM_SHOTS (default
# BUILD/shots, so a test run leaves the tree clean; PAGEDLLM_SHOTS=docs
# renews the README's pictures).

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(getcwd);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $root = getcwd;
my $chromium = '/usr/bin/chromium';
my $have = ok(-x $chromium,
              'Debian\'s chromium is installed (make test-deps)');
$have &= ok(-d "$root/t/node/node_modules/playwright-core",
            'playwright-core is installed (make test-deps)');
unless ($have) {
    done_testing;
    exit 1;
}

# a vocabulary padded to 65536 ids makes each token cost milliseconds: a
# generation of 1800 tokens lasts seconds, long enough to watch the map.
# The sanitized engine (make test-sanitize) is that slow with 4096 ids
# already: with 65536 it made 12 tokens a second, minutes a generation
my $vocab = $ENV{PAGEDLLM_TEST_SANITIZED} ? 4096 : 65536;
my $probe = PagedLLM::Test->new;
my $dir = $probe->dir;
system("$ENV{PAGEDLLM_BUILD}/mktinymodel", '--vocab-size', $vocab,
       "$dir/slow") == 0 or die "mktinymodel failed\n";
system("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
       . " -nodes -days 2 -subj /CN=127.0.0.1"
       . " -addext subjectAltName=IP:127.0.0.1"
       . " -keyout $dir/key.pem -out $dir/cert.pem 2>/dev/null") == 0
    or die "openssl could not make a certificate\n";

my $other = PagedLLM::Test::free_port();
my $h2 = PagedLLM::Test::free_port();
my $t = PagedLLM::Test->new(model => "$dir/slow",
    engine_args => ['--preemption-mode', 'swap', '--swap-space', '2'],
    http => <<"EOF",
    pagedllm_cors http://127.0.0.1:$other;

    server {
        listen 127.0.0.1:$other;

        location /ui/ {
            pagedllm_ui;
        }
    }

    server {
        listen 127.0.0.1:$h2 ssl http2;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;

        location /v1/ {
            pagedllm;
        }

        location /ui/ {
            pagedllm_ui;
        }
    }
EOF
    server => "        location /ui/ { pagedllm_ui; }\n")->start;
$t->wait_status(sub { $_[0]{engine} eq 'attached' }, 10);

my $api = 'http://127.0.0.1:' . $t->port;
my @pages = ("h1=$api/ui/",
             "cors=http://127.0.0.1:$other/ui/?api=$api/v1",
             "h2=https://127.0.0.1:$h2/ui/");
my $shots = $ENV{PAGEDLLM_SHOTS} // "$ENV{PAGEDLLM_BUILD}/shots";
$shots = "$root/$shots" unless $shots =~ m{^/};
mkdir $shots;
unlink "$shots/ui-playground.png", "$shots/ui-blockmap.png";
my $cmd = "cd $root/t/node && node ui-browser.mjs $chromium $shots";
my $out = `$cmd @pages 2>&1`;
is($?, 0, 'the browser script ran') or diag($out);
my %r = map { $_->{name} => $_ }
        map { eval { decode_json($_) } // () } grep /^\{/, split /\n/, $out;

my %proto = (h1 => 'http/1.1', cors => 'http/1.1', h2 => 'h2');
for my $name (qw(h1 cors h2)) {
    my $r = $r{$name} // { failed => "no result:\n$out" };
    ok(!$r->{failed}, "$name: the page ran") or diag($r->{failed});
    is($r->{model}, 'slow', "$name: the model picker lists the served model");
    is($r->{error}, '', "$name: no error shown");
    my $ntok = $name eq 'h1' ? 3600 : 1800;     # h1 asks for n = 2
    is($r->{ntok}, $ntok, "$name: $ntok tokens counted");
    ok($r->{text_len} > 0, "$name: the text appeared");
    my @u = @{ $r->{updates} // [] };
    ok(@u >= 3, "$name: the text grew over " . scalar(@u)
       . " DOM updates, one after another");
    ok(@u && $u[-1]{t} - $u[0]{t} > 100,
       sprintf("$name: first and last DOM updates %.0f ms apart",
               @u ? $u[-1]{t} - $u[0]{t} : 0));
    like($r->{ttft} // '', qr/^\d+ ms$/, "$name: TTFT shown ($r->{ttft})");
    like($r->{tps} // '', qr/^\d+\.\d$/, "$name: tokens/s shown ($r->{tps})");
    # a cross-origin call's timing hides its protocol (no
    # Timing-Allow-Origin): the empty string says the browser took it as
    # cross-origin
    my $via = $name eq 'cors' ? '' : $proto{$name};
    my %via = map { $_ => 1 } @{ $r->{protocols} // [] };
    is_deeply([ keys %via ], [ $via ],
              "$name: completion calls seen by the page over '$via'");
    is($r->{page_protocol}, $proto{$name},
       "$name: the page came over $proto{$name}");
    ok(($r->{used_during} // 0) > 0,
       "$name: the map shows $r->{used_during} used blocks during the run");
    ok($r->{mine_listed}, "$name: this page's request is among the owners")
        or diag("owners: $r->{owners}");
    ok(($r->{map_updates_per_s} // 0) >= 3,
       sprintf("$name: the map changes %.1f times a second",
               $r->{map_updates_per_s} // 0));
    is($r->{used_after_end}, 0, "$name: no used block after the end");
    ok(($r->{used_before_abort} // 0) > 0,
       "$name: the next generation holds blocks");
    is($r->{used_after_abort}, 0, "$name: no used block after Stop");
    is($r->{error_after_abort}, '', "$name: Stop shows no error");
}

for my $png ('ui-playground.png', 'ui-blockmap.png') {
    open my $fh, '<:raw', "$shots/$png";
    my $head = '';
    read($fh, $head, 8) if $fh;
    is($head, "\x89PNG\r\n\x1a\n", "$png written");
}

done_testing;
