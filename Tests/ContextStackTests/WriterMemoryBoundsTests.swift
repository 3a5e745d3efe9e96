@testable import ContextStack
@testable import _ContextStackModel
import Testing

/// What the writer remembers between batches is bounded, as Docs/Concurrency.md and
/// Docs/Writing.md say: the objects of failed inserts (`FailedInserts`) and the objects merged
/// into rows other processes saved (`MergedObjects`), 100,000 of each, the oldest commits'
/// forgotten first and the newest commit's always kept whole.
@Suite struct WriterMemoryBoundsTests {
    static func ids(_ keys: Range<Int64>) throws -> [ObjectID] {
        let store = try TestStore(.memory)
        let root = store.stack.graph.entity(for: Person.self).rootDescription
        return keys.map { ObjectID(rootEntity: root, primaryKey: $0) }
    }

    @Test func failedInsertsForgetTheOldestCommitsPastTheLimit() throws {
        var failed = FailedInserts()
        let old = try Self.ids(0..<Int64(FailedInserts.limit))
        failed.add(old)
        #expect(failed.objects.count == FailedInserts.limit)
        let newer = try Self.ids(1_000_000..<1_000_001)
        failed.add(newer)
        #expect(failed.objects == Set(newer), "the oldest commit's objects are forgotten past the limit")
        let newest = try Self.ids(2_000_000..<(2_000_000 + Int64(FailedInserts.limit) + 1))
        failed.add(newest)
        #expect(failed.objects == Set(newest), "the newest commit is kept whole, past the limit too")
    }

    @Test func mergedObjectsForgetTheOldestCommitsPastTheLimit() throws {
        var merged = MergedObjects()
        let target = try Self.ids(-1..<0)[0]
        let old = try Self.ids(0..<Int64(MergedObjects.limit))
        merged.add(Dictionary(uniqueKeysWithValues: old.map { ($0, target) }))
        #expect(merged.rows.count == MergedObjects.limit)
        let newer = try Self.ids(1_000_000..<1_000_001)
        merged.add([newer[0]: target])
        #expect(merged.rows == [newer[0]: target], "the oldest commit's objects are forgotten past the limit")
        let newest = try Self.ids(2_000_000..<(2_000_000 + Int64(MergedObjects.limit) + 1))
        merged.add(Dictionary(uniqueKeysWithValues: newest.map { ($0, target) }))
        #expect(merged.rows.count == MergedObjects.limit + 1, "the newest commit is kept whole, past the limit too")
    }
}
