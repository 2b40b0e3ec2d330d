use Data::Compare;

# Sandbox Fusion's image bundles Data::Compare; MultiPL-E-style Perl tests compare structures with it.
print Compare({a => [1, 2]}, {a => [1, 2]}) && !Compare([1], [2]) ? "hello\n" : "Data::Compare disagrees\n";
