import _ContextStackCore
@testable import _ContextStackModel
import Testing

/// The overlay, on its own: what a read sees of commits queued for the writer and not yet
/// written, as later commits to the same rows arrive and written ones leave.
@Suite struct OverlayTests {
    private let person: ResolvedEntity

    init() throws {
        person = try Model(fullModelTypes).graph.entity(for: Person.self)
    }
    private var name: Int { person.property(named: "name")!.slot }
    private var age: Int { person.property(named: "age")!.slot }

    private func id(_ key: Int64) -> ObjectID { ObjectID(rootEntity: person.rootDescription, primaryKey: key) }

    private func update(_ key: Int64, _ changes: [(Int, Value)]) -> ChangeSet {
        var changeSet = ChangeSet()
        changeSet.updates = [.init(id: id(key), entity: person, slots: changes.map(\.0), values: changes.map(\.1))]
        return changeSet
    }

    private func deletion(_ key: Int64) -> ChangeSet {
        var changeSet = ChangeSet()
        changeSet.deletes = [(id(key), person)]
        return changeSet
    }

    /// The changed slots of a pending update, as a dictionary, or nil for another entry.
    private func pendingSlots(_ overlay: Overlay, _ key: Int64) -> [Int: Value]? {
        guard case .updated(_, let slots, let values)? = overlay.entry(for: id(key))?.pending else { return nil }
        return Dictionary(uniqueKeysWithValues: zip(slots, values))
    }

    @Test func laterUpdatesOfARowMergeSlotBySlot() {
        var overlay = Overlay()
        overlay.apply(update(1, [(name, .text("Ada")), (age, .integer(30))]), sequence: 1)
        overlay.apply(update(1, [(age, .integer(31))]), sequence: 2)
        #expect(pendingSlots(overlay, 1) == [name: .text("Ada"), age: .integer(31)])
        // The first commit is written, or failed: the row stays pending for the second, with
        // its slots alone. The name is the store's now; were it kept, a failed first commit's
        // name would show until the second was written, and its undo would read it back as
        // stored (FailedSaveTests.aFailedSaveIsUndoneWhenALaterCommitChangedTheSameObject).
        overlay.removeWritten(upTo: 1)
        #expect(pendingSlots(overlay, 1) == [age: .integer(31)])
        overlay.removeWritten(upTo: 2)
        #expect(overlay.isEmpty)
    }

    /// Three commits to one row: each leaves with the slots it set last.
    @Test func eachWrittenCommitTakesTheSlotsItSetLast() {
        var overlay = Overlay()
        overlay.apply(update(1, [(name, .text("Ada")), (age, .integer(30))]), sequence: 1)
        overlay.apply(update(1, [(age, .integer(31))]), sequence: 2)
        overlay.apply(update(1, [(name, .text("Bea"))]), sequence: 3)
        #expect(pendingSlots(overlay, 1) == [name: .text("Bea"), age: .integer(31)])
        overlay.removeWritten(upTo: 1)
        #expect(pendingSlots(overlay, 1) == [name: .text("Bea"), age: .integer(31)])
        overlay.removeWritten(upTo: 2)
        #expect(pendingSlots(overlay, 1) == [name: .text("Bea")])
        overlay.apply(update(1, [(age, .integer(32))]), sequence: 4)
        overlay.removeWritten(upTo: 3)
        #expect(pendingSlots(overlay, 1) == [age: .integer(32)])
        overlay.removeWritten(upTo: 4)
        #expect(overlay.isEmpty)
    }

    @Test func anUpdateOfAPendingInsertChangesTheInsertedRow() {
        var overlay = Overlay()
        var insert = ChangeSet()
        var values = person.defaults
        values[name] = .text("Ada")
        insert.inserts = [(id(1), ObjectRow(entity: person, values: values))]
        overlay.apply(insert, sequence: 1)
        overlay.apply(update(1, [(age, .integer(40))]), sequence: 2)
        guard case .inserted(let row)? = overlay.entry(for: id(1))?.pending else {
            Issue.record("the insert is no longer pending")
            return
        }
        #expect(row.values[name] == .text("Ada") && row.values[age] == .integer(40))
        // The insert is written, or failed: what the update set stays pending, as an update
        // (of the stored row, or of none when the insert failed: reads then find none). A
        // failed insert's row no longer shows, and its undo reads it as gone.
        overlay.removeWritten(upTo: 1)
        #expect(pendingSlots(overlay, 1) == [age: .integer(40)])
        overlay.removeWritten(upTo: 2)
        #expect(overlay.isEmpty)
    }

    /// A row deleted by a queued commit stays deleted whatever a later update says, and goes
    /// when the delete is written even if the table has later commits pending.
    @Test func aDeletedRowIgnoresLaterUpdatesAndLeavesWhenWritten() {
        var overlay = Overlay()
        overlay.apply(deletion(1), sequence: 1)
        overlay.apply(update(1, [(age, .integer(40))]), sequence: 2)
        overlay.apply(update(2, [(age, .integer(50))]), sequence: 3)
        guard case .deleted? = overlay.entry(for: id(1))?.pending else {
            Issue.record("the delete is no longer pending")
            return
        }
        overlay.removeWritten(upTo: 2)
        #expect(overlay.entry(for: id(1)) == nil)
        #expect(pendingSlots(overlay, 2) == [age: .integer(50)])
        overlay.removeWritten(upTo: 3)
        #expect(overlay.isEmpty)
    }

    /// The update that a delete ignored still counts as the table's last commit: writing the
    /// delete alone empties the table, and later writes find nothing to remove.
    @Test func aTableEmptiedBeforeItsLastCommitIsWrittenStaysEmpty() {
        var overlay = Overlay()
        overlay.apply(deletion(1), sequence: 1)
        overlay.apply(update(1, [(age, .integer(40))]), sequence: 2)
        overlay.removeWritten(upTo: 1)
        #expect(overlay.isEmpty)
        overlay.removeWritten(upTo: 1)
        overlay.removeWritten(upTo: 2)
        #expect(overlay.isEmpty)
    }
}
