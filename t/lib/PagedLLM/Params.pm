package PagedLLM::Params;

# The sampling parameter table, PL_PARAMS in proto/pl_params.h, read from
# the header itself so that the tests walking it follow every row added:
#
#   my ($rows, $def) = PagedLLM::Params::table();
#   # $rows: [{ name, int, lo, hi, limit, open_lo }], in the table's order
#   # $def:  the #defines of pl_params.h and pl_proto.h (PL_PARAM_BIAS_LO…)
#   my ($lo, $hi, $under, $over) = PagedLLM::Params::bounds($row, $ctx,
#                                                          $vocab, $prompt);
#
# bounds() gives the lowest and highest values a request may send (a
# bound that is the context leaves room for a prompt of $prompt tokens; a
# range open at lo starts a little above it) and the nearest values just
# outside them (above a context bound: the context plus one, which the
# parser itself refuses).  refused($r, $param, $name) and accepted($r,
# $name) check an answer: a 400 naming $param, or a 200.

use strict;
use warnings;

use Exporter qw(import);
use Test::More;

our @EXPORT_OK = qw(refused accepted);

sub table {
    my $header = 'proto/pl_params.h';
    my %def;
    for my $f ($header, 'proto/pl_proto.h') {
        open my $fh, '<', $f or die "$f: $!\n";
        while (<$fh>) {
            $def{$1} = $2
                if /^#define\s+(PL_\w+)\s+\(?(-?[\d.]+)u?\)?\s*(?:\/\*.*)?$/;
        }
    }

    open my $fh, '<', $header or die "$header: $!\n";
    my $src = do { local $/; <$fh> };
    $src =~ s{/\*.*?\*/}{}gs;
    $src =~ s{\\\n}{ }g;
    my ($table) = $src =~ /#define\s+PL_PARAMS\(X\)(.*)/
        or die "no PL_PARAMS in $header\n";

    my @rows;
    while ($table =~ /X\(([^)]*)\)/g) {
        my ($name, $type, $lo, $hi, $limit, $open_lo) =
            map { s/^\s+|\s+$//gr } split /,/, $1;
        my $num = sub { exists $def{ $_[0] } ? $def{ $_[0] } : $_[0] };
        push @rows, { name => $name, int => $type eq 'PL_PARAM_INT',
                      lo => $num->($lo), hi => $num->($hi),
                      limit => $limit, open_lo => $open_lo };
    }

    return (\@rows, \%def);
}

sub bounds {
    my ($p, $ctx, $vocab, $prompt) = @_;
    my $hi = $p->{limit} eq 'PL_PARAM_CONTEXT' ? $ctx - $prompt
           : $p->{limit} eq 'PL_PARAM_VOCAB' ? $vocab : $p->{hi};
    my $over = $p->{limit} eq 'PL_PARAM_CONTEXT' ? $ctx + 1
             : $p->{int} ? $hi + 1 : $hi + 0.01;
    my $under = $p->{open_lo} ? $p->{lo}
              : $p->{int} ? $p->{lo} - 1 : $p->{lo} - 0.01;
    my $lo = $p->{open_lo} ? $p->{lo} + 0.01 : $p->{lo};
    return ($lo, $hi, $under, $over);
}

sub refused {
    my ($r, $param, $name) = @_;
    ok($r->{status} == 400 && ($r->{json}{error}{param} // '') eq $param,
       "$name: 400 naming $param")
        or diag("status $r->{status}: $r->{body}");
}

sub accepted {
    my ($r, $name) = @_;
    is($r->{status}, 200, "$name: accepted") or diag($r->{body});
}

1;
