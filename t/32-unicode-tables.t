#!/usr/bin/perl
# 32-unicode-tables.t: text/pl_unicode_tables.c is exactly what
# tools/gen-unicode-tables writes from Debian's unicode-data package, so
# the committed table can always be regenerated and reviewed.
use strict;
use warnings;
use FindBin;
use Test::More;

my $root = "$FindBin::Bin/..";

ok(-r '/usr/share/unicode/UnicodeData.txt',
   'unicode-data is installed (apt-get install unicode-data)')
    or BAIL_OUT('the Unicode Character Database is missing');

my $generated = qx{perl "$root/tools/gen-unicode-tables"};
is($?, 0, 'gen-unicode-tables ran');

open(my $fh, '<:raw', "$root/text/pl_unicode_tables.c")
    or die "pl_unicode_tables.c: $!";
my $committed = do { local $/; <$fh> };
close $fh;

cmp_ok(length($generated), '>', 100_000, 'a full table was generated');
ok($generated eq $committed,
   'regenerating gives text/pl_unicode_tables.c byte for byte');
like($committed, qr/Unicode \d+\.\d+\.\d+ character data/,
     'the table names its Unicode version');

done_testing();
