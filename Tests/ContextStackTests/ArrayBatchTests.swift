@testable import ContextStack
import Testing

/// The one-pass removals and insertions that keep live results up to date
/// (`Array.remove(atSortedIndices:)`, `Array.insert(_:)`), against `remove(at:)` and
/// `insert(_:at:)` one at a time, on references (each freed exactly once: none leaks, none is
/// released twice) and on arrays of values.
@Suite struct ArrayBatchTests {
    final class Tracked {
        let value: Int
        let freed: Counter
        init(_ value: Int, _ freed: Counter) { self.value = value; self.freed = freed }
        deinit { freed.count += 1 }
    }

    final class Counter: @unchecked Sendable {
        // @unchecked: touched by one test's thread only.
        var count = 0
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func batchesAgreeWithOneAtATime(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        let freed = Counter()
        var made = 0
        for _ in 0..<300 {
            let size = Int.random(in: 0...60, using: &random)
            var batch = (0..<size).map { Tracked($0, freed) }
            var single = batch
            var rows = (0..<size).map { ContiguousArray([Value.integer(Int64($0)), .text("row \($0)")]) }
            var singleRows = rows
            made += size
            // Removals: a random subset, in increasing order.
            let removed = (0..<size).filter { _ in Int.random(in: 0..<4, using: &random) == 0 }
            batch.remove(atSortedIndices: removed)
            rows.remove(atSortedIndices: removed)
            for index in removed.reversed() {
                single.remove(at: index)
                singleRows.remove(at: index)
            }
            #expect(batch.map(\.value) == single.map(\.value))
            #expect(rows == singleRows)
            // Insertions: positions among what is left, not decreasing, some repeated.
            let count = Int.random(in: 0...12, using: &random)
            let positions = (0..<count).map { _ in Int.random(in: 0...batch.count, using: &random) }.sorted()
            let items = positions.enumerated().map { (position: $0.element, element: Tracked(1000 + $0.offset, freed)) }
            made += count
            batch.insert(items)
            rows.insert(items.map { ($0.position, ContiguousArray([Value.integer(Int64($0.element.value))])) })
            for (offset, item) in items.enumerated() {
                // Each earlier one made the later positions one further.
                single.insert(item.element, at: item.position + offset)
                singleRows.insert(ContiguousArray([Value.integer(Int64(item.element.value))]), at: item.position + offset)
            }
            #expect(batch.map(\.value) == single.map(\.value))
            #expect(rows == singleRows)
        }
        #expect(freed.count == made, "every element freed exactly once")
    }
}
