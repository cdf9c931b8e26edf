#!/usr/bin/perl
# Routing by model: one group of three CPU engines serving two different
# tiny models ("tiny" on engines 0 and 2, from two copies of its folder;
# "tiny2", a vocabulary padded to 640 and a context of 1024, on engine 1).  A request goes to an engine
# serving its "model", parsed and checked against that engine (its
# context, its tokenizer); one without "model" goes to the group's first
# model; /v1/models lists the union; an unknown model is a 404, a known
# one whose engines are all down a 503.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Engines;
use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $build = $ENV{PAGEDLLM_BUILD} or die "PAGEDLLM_BUILD is not set\n";

my $tmp = PagedLLM::Test->new->dir;
system("$build/mktinymodel", '--vocab-size', '640', "$tmp/tiny2") == 0
    or die "mktinymodel failed\n";

# engine 2 loads tiny from a copy of its folder: another tokenizer path,
# the same content and model name, so one tokenizer serves both
mkdir "$tmp/copy";
system('cp', '-r', "$build/models/tiny", "$tmp/copy/tiny") == 0
    or die "cp failed\n";

my $t = PagedLLM::Engines::start(3,
    models => [ undef, "$tmp/tiny2", "$tmp/copy/tiny" ],
    args => [ [], [ '--max-model-len', '1024' ], [] ]);

sub requests { PagedLLM::Engines::counter($t, 'pagedllm_requests_total') }

sub served {
    my ($n, %req) = @_;
    my @before = requests();
    my $ok = 1;
    for (1 .. $n) {
        $ok &&= $t->completion(prompt => 'Hi', max_tokens => 2, %req)
                  ->{status} == 200;
    }
    return ($ok, PagedLLM::Engines::delta([ requests() ], \@before));
}

my $models = $t->request(GET => '/v1/models')->{json}{data} // [];
is_deeply([ map { $_->{id} } @$models ], [ 'tiny', 'tiny2' ],
          '/v1/models: the union of the models served, each once');
is_deeply([ map { $_->{max_model_len} } @$models ], [ 2048, 1024 ],
          "/v1/models: each model's own context");
my $one = $t->request(GET => '/v1/models/tiny2');
is($one->{json}{id}, 'tiny2', '/v1/models/tiny2: that model');

my ($ok, @d) = served(6, model => 'tiny2');
ok($ok, 'model tiny2: served');
is_deeply(\@d, [ 0, 6, 0 ], 'model tiny2: every request on engine 1');

($ok, @d) = served(6, model => 'tiny');
ok($ok, 'model tiny: served');
ok($d[1] == 0 && $d[0] > 0 && $d[2] > 0,
   "model tiny: on engines 0 and 2 only, both used, though they load "
   . "it from two folders (@d)");

($ok, @d) = served(4);
ok($ok && $d[1] == 0, "no model: the group's first model, tiny (@d)");

my $r = $t->completion(prompt => 'Hi', max_tokens => 2, model => 'tiny3');
is($r->{status}, 404, 'an unknown model: 404');
is($r->{json}{error}{code}, 'model_not_found',
   'an unknown model: code model_not_found');

# parsed and checked against the model's own engine
for my $m ([ 'tiny', 2048 ], [ 'tiny2', 1024 ]) {
    $r = $t->request(POST => '/v1/tokenize',
                     $J->encode({ model => $m->[0], prompt => 'Hello' }));
    is($r->{json}{max_model_len}, $m->[1],
       "tokenize with model $m->[0]: its engine's context, $m->[1]");
}
my $long = 'The quick brown fox jumps over the lazy dog. ' x 100;
my $n = $t->request(POST => '/v1/tokenize',
                    $J->encode({ prompt => $long }))->{json}{count};
ok($n > 1024 && $n < 2000, "a prompt of $n tokens");
is($t->completion(prompt => $long, max_tokens => 2, model => 'tiny')
     ->{status}, 200, "$n tokens fit tiny's context of 2048");
$r = $t->completion(prompt => $long, max_tokens => 2, model => 'tiny2');
is($r->{status}, 400, "$n tokens do not fit tiny2's context of 1024");

# the only engine of tiny2 down: tiny2 is unavailable, not unknown
$t->stop_engine_n(1, 'KILL');
PagedLLM::Engines::wait_attached($t, [0, 2], [1]);
$r = $t->completion(prompt => 'Hi', max_tokens => 2, model => 'tiny2');
is($r->{status}, 503, 'tiny2 down: 503');
like($r->{headers}{'retry-after'} // '', qr/^\d+$/, 'tiny2 down: Retry-After');
is_deeply([ map { $_->{id} }
            @{ $t->request(GET => '/v1/models')->{json}{data} // [] } ],
          [ 'tiny' ], 'tiny2 down: /v1/models lists tiny alone');
($ok) = served(2, model => 'tiny');
ok($ok, 'tiny2 down: tiny still served');

PagedLLM::Engines::start_engine($t, 1);
PagedLLM::Engines::wait_attached($t, [0, 1, 2]);
($ok, @d) = served(2, model => 'tiny2');
ok($ok && $d[1] == 2, 'tiny2 back: served by engine 1 again');

$t->finish;
done_testing;
