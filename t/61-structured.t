#!/usr/bin/perl
# Structured outputs end to end: the grammar engine held to independent
# matchers (node's RegExp for regexes, ajv for JSON Schema) on random and
# sampled strings, then every schema of t/fixtures/grammar/schemas.json and
# every regex of regexes.json asked of the random-weight tiny model through
# nginx, with seeds: each finished output parses and validates (ajv, or
# RegExp), each output max_tokens cut ends with finish_reason "length" and
# is a prefix the automaton can still complete; response_format on both
# endpoints, guided_choice, guided_grammar, greedy, top_p, n, best_of and
# streaming; and the 400s for what cannot be done.

use strict;
use utf8;
use warnings;

use lib 't/lib';
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

binmode(Test::More->builder->$_, ':utf8')
    for qw(output failure_output todo_output);

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $root = $ENV{PAGEDLLM_ROOT} // '.';
my $build = $ENV{PAGEDLLM_BUILD};
my $cli = "$build/pagedllm-grammar";
my $fix = "$root/t/fixtures/grammar";
my $node = "$root/t/node/grammar-check.mjs";
my $tmp = tempdir('pagedllm-g-XXXXXX', TMPDIR => 1, CLEANUP => 1);

sub slurp { local $/; open my $f, '<:raw', $_[0] or die "$_[0]: $!"; <$f> }
sub spew { open my $f, '>:raw', $_[0] or die "$_[0]: $!"; print $f $_[1]; close $f }
sub hex_of { my $b = $_[0]; utf8::encode($b); unpack('H*', $b) }

my $schemas = $J->decode(slurp("$fix/schemas.json"));
my $regexes = $J->decode(slurp("$fix/regexes.json"));
ok(@$schemas >= 40, scalar(@$schemas) . ' schemas');
ok(@$regexes >= 20, scalar(@$regexes) . ' regexes');

for my $i (0 .. $#$schemas) {
    spew("$tmp/schema-$i.json", $J->encode($schemas->[$i]{schema}));
}

# ---- the automaton against independent matchers ----

my $prop = $J->decode(`node $node prop $cli $fix $tmp`);
ok($prop->{checked} > 20000,
   "property test: $prop->{checked} strings and samples checked");
is_deeply($prop->{failures}, [],
          'the automaton agrees with RegExp on every string, every prefix '
          . 'of a match is viable, every schema sample validates with ajv')
    or diag($J->encode($prop->{failures}));

# ---- generations through nginx ----

my $t = PagedLLM::Test->new->start;
my (@finished, @cut);
my %finish;

# ([prefix-checker args], choices) of one answer into @finished and @cut
sub collect {
    my ($what, $check, $r, $name) = @_;
    my $choices = $r->{json}{choices} // [];
    for my $c (@$choices) {
        my $text = $c->{text} // $c->{message}{content};
        $finish{$c->{finish_reason}}++;
        if ($c->{finish_reason} eq 'stop') {
            push @finished, { %$what, text => $text };
        } else {
            push @cut, { check => $check, text => $text, name => $name,
                         finish => $c->{finish_reason} };
        }
    }
    return scalar @$choices;
}

my ($bad, $seed) = (0, 1);
for my $i (0 .. $#$schemas) {
    my $s = $schemas->[$i];
    my $r = $t->completion(prompt => "JSON $i:", max_tokens => 160,
                           n => 2, seed => $seed++, guided_json => $s->{schema});
    $bad++, diag("$s->{name}: $r->{status} " . ($r->{body} // ''))
        unless $r->{status} == 200
               && collect({ schema => $s->{schema}, name => $s->{name} },
                          ['--schema', "$tmp/schema-$i.json"], $r,
                          $s->{name}) == 2;
}
is($bad, 0, 'every schema: 200 with two choices (guided_json, n 2)');

$bad = 0;
for my $re (@$regexes) {
    my $r = $t->completion(prompt => 'Match:', max_tokens => 40, n => 2,
                           seed => $seed++, guided_regex => $re);
    $bad++, diag("$re: $r->{status}")
        unless $r->{status} == 200
               && collect({ regex => $re }, ['--regex', $re], $r, $re) == 2;
}
is($bad, 0, 'every regex: 200 with two choices (guided_regex, n 2)');

# the same schemas by response_format on the chat endpoint, other sampling
my @sampling = ({ temperature => 0 }, { top_p => 0.5 },
                { temperature => 1.5, top_k => 40 });
$bad = 0;
for my $i (0 .. $#$schemas) {
    my $s = $schemas->[$i];
    my $r = $t->request(POST => '/v1/chat/completions', $J->encode({
        messages => [{ role => 'user', content => "Give JSON $i" }],
        max_tokens => 160, seed => $seed++, %{ $sampling[$i % @sampling] },
        response_format => { type => 'json_schema',
                             json_schema => { name => "s$i",
                                              schema => $s->{schema},
                                              strict => $T } } }));
    $bad++, diag("chat $s->{name}: $r->{status}")
        unless $r->{status} == 200
               && collect({ schema => $s->{schema}, name => $s->{name} },
                          ['--schema', "$tmp/schema-$i.json"], $r,
                          "chat $s->{name}") == 1;
}
is($bad, 0, 'every schema by response_format json_schema on chat, greedy, '
            . 'top_p and top_k: 200');

# best_of ranks sequences that all kept to the grammar
$bad = 0;
for my $i (grep { $_ % 3 == 0 } 0 .. $#$schemas) {
    my $s = $schemas->[$i];
    my $r = $t->completion(prompt => "Best $i:", max_tokens => 160,
                           best_of => 3, n => 2, seed => $seed++,
                           response_format => { type => 'json_schema',
                               json_schema => { name => "b$i",
                                                schema => $s->{schema} } });
    $bad++, diag("best_of $s->{name}: $r->{status}")
        unless $r->{status} == 200
               && collect({ schema => $s->{schema}, name => $s->{name} },
                          ['--schema', "$tmp/schema-$i.json"], $r,
                          "best_of $s->{name}") == 2;
}
is($bad, 0, 'response_format json_schema on completions with best_of 3, '
            . 'n 2: 200');

# json_object on both endpoints, streamed and not
my $obj = { type => 'object' };
for my $k (1 .. 3) {
    my $r = $t->completion(prompt => 'Object:', max_tokens => 200,
                           seed => $seed++,
                           response_format => { type => 'json_object' });
    is($r->{status}, 200, "json_object on completions ($k): 200");
    collect({ schema => $obj, name => 'json_object' }, ['--json-object'], $r,
            'json_object');
    my $st = $t->stream_json('/v1/chat/completions',
        messages => [{ role => 'user', content => 'An object' }],
        max_tokens => 200, seed => $seed++,
        response_format => { type => 'json_object' });
    my $text = join('', map { $_->{choices}[0]{delta}{content} // '' }
                        grep { @{ $_->{choices} } } @{ $st->{events} });
    my ($last) = grep { @{ $_->{choices} } && $_->{choices}[0]{finish_reason} }
                 @{ $st->{events} };
    ok($st->{done} && $last, "json_object streamed on chat ($k): [DONE]");
    collect({ schema => $obj, name => 'json_object streamed' },
            ['--json-object'], { json => { choices => [{ text => $text,
                finish_reason => $last->{choices}[0]{finish_reason} }] } },
            'json_object streamed');
}

# guided_choice
my @choices = ('yes', 'no', 'maybe not', "ünïcode \"q\"");
my %seen;
for my $k (1 .. 6) {
    my $r = $t->completion(prompt => 'Pick:', max_tokens => 20,
                           seed => $seed++, guided_choice => \@choices);
    my $c = $r->{json}{choices}[0];
    $seen{$c->{text}}++ if $c->{finish_reason} eq 'stop';
}
ok(keys %seen >= 1 && !grep({ my $x = $_; !grep { $_ eq $x } @choices }
                            keys %seen),
   'guided_choice: every finished output is one of the choices ('
   . join(', ', sort keys %seen) . ')');

# min_tokens keeping eos out where the grammar allows only eos: the output
# ends there, complete
for my $temp (0, 1) {
    my $r = $t->completion(prompt => 'Say yes:', max_tokens => 20,
                           min_tokens => 6, temperature => $temp,
                           seed => $seed++, guided_choice => ['yes']);
    my $c = $r->{json}{choices}[0] // {};
    ok($r->{status} == 200 && ($c->{text} // '') eq 'yes'
       && ($c->{finish_reason} // '') eq 'stop',
       "min_tokens past the grammar's end (temperature $temp): 'yes', stop");
}

# guided_grammar: the EBNF subset
my $ebnf = <<'G';
root ::= "(" expr ")"          # a parenthesized sum
expr ::= term ("+" term){0,3}
term ::= [0-9] | "x" | "(" expr ")"
G
spew("$tmp/g.ebnf", $ebnf);
for my $k (1 .. 4) {
    my $r = $t->completion(prompt => 'Sum:', max_tokens => 60,
                           seed => $seed++, guided_grammar => $ebnf);
    is($r->{status}, 200, "guided_grammar ($k): 200");
    my $c = $r->{json}{choices}[0];
    my $text = $c->{text};
    if ($c->{finish_reason} eq 'stop') {
        my $m = `printf '%s\\n' @{[ hex_of($text) ]} | $cli --ebnf $tmp/g.ebnf --match`;
        is($m, "M\n", "guided_grammar ($k): '$text' is in the language");
        my $depth = 0;
        my $ok = $text =~ /^\(/;
        for my $ch (split //, $text) {
            $depth += $ch eq '(' ? 1 : $ch eq ')' ? -1 : 0;
            $ok = 0 if $depth < 0;
        }
        ok($ok && $depth == 0, "guided_grammar ($k): parentheses balance");
    } else {
        push @cut, { check => ['--ebnf', "$tmp/g.ebnf"], text => $text,
                     name => 'guided_grammar', finish => $c->{finish_reason} };
    }
}

# ---- what came back ----

spew("$tmp/finished.json", $J->encode(\@finished));
my $v = $J->decode(`node $node validate $tmp/finished.json`);
ok(@finished >= 100, scalar(@finished) . ' finished outputs, '
   . scalar(@cut) . ' cut by max_tokens ('
   . join(', ', map { "$_ $finish{$_}" } sort keys %finish) . ')');
is($v->{checked}, scalar @finished, 'ajv / RegExp checked every one');
is_deeply($v->{failures}, [],
          'every finished output parses and validates (ajv) or matches '
          . '(RegExp)')
    or diag($J->encode($v->{failures}));

my ($not_length, $not_prefix) = (0, 0);
my %by;
push @{ $by{join("\0", @{ $_->{check} })} }, $_ for @cut;
for my $key (sort keys %by) {
    my @items = @{ $by{$key} };
    my @args = split /\0/, $key;
    my $in = join('', map { hex_of($_->{text} =~ s/\x{FFFD}+\z//r) . "\n" }
                          @items);
    spew("$tmp/cut.hex", $in);
    my @m = split /\n/, `$cli @{[ map { "'$_'" } @args ]} --match < $tmp/cut.hex`;
    for my $k (0 .. $#items) {
        $not_length++, diag("$items[$k]{name}: $items[$k]{finish}")
            unless $items[$k]{finish} eq 'length';
        $not_prefix++, diag("$items[$k]{name}: '$items[$k]{text}' is "
                            . ($m[$k] // '?'))
            unless ($m[$k] // '') =~ /^[PM]\z/;
    }
}
ok(@cut > 0, scalar(@cut) . ' outputs cut short');
is($not_length, 0, 'every output that did not finish says length');
is($not_prefix, 0, 'every output cut by max_tokens is a prefix the '
                   . 'automaton can complete (a character cut in two ends '
                   . 'in U+FFFD, as every output does; that is left out)');

# ---- refused ----

sub error_ok {
    my ($r, $param, $like, $name) = @_;
    is($r->{status}, 400, "$name: 400");
    is($r->{json}{error}{param}, $param, "$name: param $param")
        if defined $param;
    like($r->{json}{error}{message} // '', $like, "$name: message");
}

error_ok($t->completion(prompt => 'x', guided_json => { type => 'integer',
                                                        minimum => 3 }),
         'guided_json', qr/'minimum' is not supported/,
         'an unsupported keyword is named');
error_ok($t->completion(prompt => 'x', guided_json => { type => 'object',
             properties => { a => { type => 'array', prefixItems => [] } } }),
         'guided_json', qr/'prefixItems' is not supported/,
         'a nested unsupported keyword is named');
error_ok($t->completion(prompt => 'x', guided_json => { '$ref' => '#/nope' }),
         'guided_json', qr/does not resolve/, 'a dangling $ref');
error_ok($t->completion(prompt => 'x', guided_json => { type => 'object',
                                                        required => ['a'] }),
         'guided_json', qr/required property a is not in 'properties'/,
         'required without properties (found by t/fuzz/schema_fuzz.c)');
error_ok($t->completion(prompt => 'x', guided_json => '{"type":'),
         'guided_json', qr/not valid JSON/, 'guided_json as broken text');
error_ok($t->completion(prompt => 'x', guided_regex => 'a(b'),
         'guided_regex', qr/parenthesis/, 'an unbalanced regex');
error_ok($t->completion(prompt => 'x', guided_regex => '(?=a)b'),
         'guided_regex', qr/unsupported group/, 'a lookahead');
error_ok($t->completion(prompt => 'x', guided_grammar => 'root ::= foo'),
         'guided_grammar', qr/'foo' is used but never defined/,
         'an undefined rule');
error_ok($t->completion(prompt => 'x', guided_grammar => 'start ::= "a"'),
         'guided_grammar', qr/no rule named root/, 'no root rule');
error_ok($t->completion(prompt => 'x', guided_choice => []),
         'guided_choice', qr/non-empty array/, 'no choices');
error_ok($t->completion(prompt => 'x', guided_regex => 'a',
                        guided_choice => ['a']),
         undef, qr/cannot be combined/, 'two constraints');
error_ok($t->completion(prompt => 'x', response_format => {
             type => 'json_schema' }),
         'response_format', qr/needs a 'json_schema' object/,
         'json_schema without its object');
error_ok($t->completion(prompt => 'x', guided_regex => 'a+',
                        use_beam_search => $T, best_of => 2,
                        temperature => 0),
         undef, qr/not supported with beam search/,
         'beam search with a grammar');
error_ok($t->completion(prompt => 'x', guided_regex => 'a+',
                        ignore_eos => $T),
         undef, qr/ignore_eos/, 'ignore_eos with a grammar');

my $st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{kv_blocks}{used} == 0 }, 10);
ok($st->{json}{requests}{running} == 0 && $st->{json}{kv_blocks}{used} == 0,
   'afterwards nothing runs and no block is held');

$t->finish;
done_testing();
