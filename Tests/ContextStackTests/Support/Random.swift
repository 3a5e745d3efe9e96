/// A small seeded generator (SplitMix64), so a failing property test can be replayed.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The seeds a property test runs: a fixed one, and a fresh one printed so it can be replayed.
func propertySeeds() -> [UInt64] {
    let fresh = UInt64.random(in: 1...UInt64.max)
    print("property test seed: \(fresh) (fixed seed 20261122 runs too)")
    return [20_261_122, fresh]
}
