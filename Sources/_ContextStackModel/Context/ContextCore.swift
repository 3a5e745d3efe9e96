import Foundation
import Synchronization
import _ContextStackCore

/// The object engine behind `MainContext` and `UpdateContext`: an identity map, change
/// tracking, fetches that merge pending changes with the store, and relationship upkeep.
///
/// This file holds its state, confinement checks, the registry and row fetching; beside it,
/// `+Reading` (the typed reads), `+Faults` (late-loaded values, prefetch), `+Relationships`,
/// `+Changes` (delete rules, change sets, commit, rollback, reset), `+Inbox` (commits handed
/// to a main context) and `+Invariants` (debug checks).
///
/// All mutable state is confined to the context's execution — the main thread for a main
/// context, the running block for an update context — and `checkRead` enforces it on every
/// object access. That confinement is what makes `@unchecked Sendable` sound here; the
/// main context's inbox, the one thing other threads touch, is behind a lock.
package final class ContextCore: @unchecked Sendable {
    package enum Kind { case main, update }

    struct WeakObject {
        weak var object: ManagedObject?
        /// Deleted by this update's own commit, not found deleted: changing it stays a misuse.
        var deletedHere = false
    }

    let kind: Kind
    /// The stack that made this context, seen through what a context needs of it.
    let host: any ContextHost
    package let graph: ModelGraph
    /// Every object of this context, held weakly unless it has changes.
    ///
    /// Without Swift's run-time exclusivity check: the registry is touched on the context's
    /// own queue only, by its own methods, which call out to nothing that could reach it again
    /// while it is being changed, and the check (`swift_beginAccess`, a look-up in the
    /// thread's access set, twice an object) was 2.5 % of a 100,000-object fetch.
    @exclusivity(unchecked) var registry = Registry()
    /// Inserted, updated and deleted objects, held strongly until commit or rollback.
    ///
    /// This and the other state below have no run-time exclusivity checks, like `registry`:
    /// confined the same way, and touched by every fetch and commit (five checks of a small
    /// query's fifteen, fifteen of a one-object commit's).
    @exclusivity(unchecked) var changed: [ObjectID: ManagedObject] = [:]
    /// Objects this update created and then deleted that have a `.deny` relationship: they
    /// left `changed` (nothing of them is stored), but their rules are checked at commit all
    /// the same, as they would be had they been stored.
    @exclusivity(unchecked) var deletedInsertsToCheck: [ManagedObject] = []
    /// Objects this update created and then deleted: a pair the update added with one of them
    /// goes with it (`makeChangeSet`), also once the registry let go of the object, and a
    /// to-one the update set to one fails the commit (`checkReferencesToDeletedObjects`), which
    /// would otherwise be saved pointing at a row that never was.
    @exclusivity(unchecked) package var deletedInserts: Set<ObjectID> = []
    /// Stored objects this update deleted only because `.cascade` rules of objects it deleted
    /// reached them, with the objects and relationships that did (`ChangeSet.cascaded`).
    @exclusivity(unchecked) var cascaded: [ObjectID: [CascadeOrigin]] = [:]
    /// Objects this update's batch deletes removed from the store while the update had
    /// changes pending: a reference the update made to one of them before the batch (its
    /// rules applied to stored rows only) would fail the whole commit in the writer.
    @exclusivity(unchecked) var batchDeleted: Set<ObjectID> = []
    /// Objects whose to-many side of a relationship this update changed by setting the other
    /// side (`rex.owner = ann` for `ann`): their rows do not change, so they are not in
    /// `changed`, but they have changes (`hasChanges`), as both ends do in Core Data.
    @exclusivity(unchecked) package var touchedRelationships: Set<ObjectID> = []
    /// Objects `fetchOrCreate` made under claimed unique values, with the slots it set and the
    /// values it set them to.
    @exclusivity(unchecked) package var upserts: [ObjectID: (slots: [Int], values: [Value])] = [:]
    /// This update's pending objects by their unique values, once a `fetchOrCreate` needed it.
    @exclusivity(unchecked) var pendingUnique: PendingUniqueIndex?
    /// Join-table pairs added (`true`) or removed (`false`) since the last commit.
    @exclusivity(unchecked) var links: [LinkKey: Bool] = [:]
    @exclusivity(unchecked) var linkEnds: [LinkKey: LinkEnds] = [:]
    /// Objects that `apply(_:expecting:)` checked: their commit fails with
    /// `MergeConflictError` if the stored row changed since they were loaded, whatever the
    /// merge policy.
    @exclusivity(unchecked) var expectsStoredRow: Set<ObjectID> = []
    /// Bumped whenever loaded to-many relationships may be out of date.
    @exclusivity(unchecked) var generation = 0
    /// What `.prefetch` read ahead for objects not registered yet.
    @exclusivity(unchecked) var prefetched = PrefetchCache(generation: 0)

    /// The objects a handed-over commit deleted (main contexts), or whose row a fault found
    /// gone (`fulfill`), held weakly: if that deletion then fails to save, what undoes it
    /// inserts the row again, and the object the app holds comes back to life instead of a
    /// second object for the same ID (`revivedDeletion`). An
    /// entry stays while its object lives, also once the deletion is saved (the row never
    /// comes back then); entries of objects gone are dropped whenever the table doubles.
    @exclusivity(unchecked) var mergedDeletions: [ObjectID: WeakObject] = [:]
    @exclusivity(unchecked) var mergedDeletionsSweepAt = 64

    /// Change sets handed to a main context, applied before its next read.
    let inbox = Locked<[ChangeSet]>([])
    let inboxHasWork = Atomic<Bool>(false)

    /// For a main context that does not merge: the pinned view of the store it reads, so it
    /// sees nothing committed after it was created or last reset.
    let pinsView: Bool
    @exclusivity(unchecked) var pin: UInt64?
    /// Which pin is current, bumped by `reset()` under the inbox's lock: a correction meant for
    /// a view the context let go of (gathered by the writer before the unpin, told after it) is
    /// dropped, not applied to the new view.
    let pinEpoch = Atomic<UInt64>(0)
    /// Told on the main actor of the objects each correction to the pinned view touched, once
    /// the context's objects show it (`MainContext`'s live results follow it).
    package var afterCorrection: (@MainActor ([ObjectID]) -> Void)?
    /// Set by the public reads of a main context: the next read takes the commits handed over
    /// so far, atomically with its snapshot, and applies them before reading.
    @exclusivity(unchecked) private var drainsOnNextRead = false
    /// The `UpdateStarter` an update context belongs to (for the `.serial` deadlock check).
    package var starter: ObjectIdentifier?
    /// The first error a property accessor, or a `delete`'s rules, met in an update context
    /// since its last commit, rollback or reset. Accessors cannot throw, so what they return or
    /// change after a failed read may be incomplete (a relationship read as empty, a partner
    /// left linked); a `delete` that threw leaves its rules applied in part. The next
    /// `commit()` throws this error instead of saving such changes.
    @exclusivity(unchecked) var accessorFailure: (any Error)?

    package init(kind: Kind, host: any ContextHost, pinsView: Bool = false) {
        self.kind = kind
        self.host = host
        self.graph = host.graph
        self.pinsView = pinsView
        if pinsView && host.hasStore { pin = makePin() }
    }

    /// Pins this context's view of the store: what undoes or corrects a commit the view shows
    /// comes to its inbox, as a merging context's commits do, and its live results hear of it.
    func makePin() -> UInt64 {
        let epoch = pinEpoch.load(ordering: .relaxed)
        return store.pin { [weak self] changes in self?.handOverCorrection(changes, epoch: epoch) }
    }

    deinit {
        if let pin { host.store.unpin(pin) }
    }

    var isUpdate: Bool { kind == .update }
    package var store: any ObjectStore { host.store }

    /// Reads the store as this context sees it (through its pinned view, if it has one).
    /// `shape`: how much `body` runs (`ReadShape`).
    ///
    /// It calls the store's `withReadSession` itself rather than `ObjectStore.read`: called
    /// on `any ObjectStore`, that generic ran unspecialized and looked `Optional<T>`'s metadata
    /// up in the runtime at every read (about 460 instructions of a read-modify-write's fetch).
    package func read<T>(shape: ReadShape = .statements, _ body: (ReadSession) throws -> T) throws -> T {
        if pinsView && pin == nil { pin = makePin() }
        var result: T?
        if drainsOnNextRead {
            drainsOnNextRead = false
            var pending: [ChangeSet] = []
            try store.withReadSession(pin: pin, whileLocked: { pending = self.takeInbox() }, shape: shape) { session in
                apply(pending)
                result = try body(session)
            }
        } else {
            try store.withReadSession(pin: pin, whileLocked: nil, shape: shape) { result = try body($0) }
        }
        return readResult(result, of: store)
    }

    /// Marks the start of a public read on a main context: registered objects catch up with
    /// handed-over commits exactly as far as the read's snapshot goes. Property access never
    /// changes values; only reads, the main actor's next turn, and the return of an
    /// `AndWait` update started on the main actor do.
    package func beginRead() {
        if kind == .main { drainsOnNextRead = true }
    }

    /// Before a public read that may answer from held objects alone (`fetch(_:id:)` of a held
    /// object, a cursor's next batch): a main context applies the commits handed to it since
    /// its last read, so that an object deleted below it is not returned, as it would not be
    /// by a read that reaches the store. Nothing to do when none came.
    package func catchUp() throws {
        guard kind == .main, inboxHasWork.load(ordering: .acquiring) else { return }
        drainsOnNextRead = true
        try read(shape: .byKeys) { _ in }
    }

    /// Ends a public read: a read that never reached the store (an object already held, a
    /// query error) must not leave its catch-up to a later internal read.
    package func endRead() {
        drainsOnNextRead = false
    }

    // MARK: - Confinement

    /// Checks that `object` is used where its context runs and is not invalidated, and loads
    /// its values if it is a fault (all of them, or those missing for `slot` when given).
    @inline(__always)
    package func checkRead(_ object: ManagedObject, slot: Int? = nil) {
        checkConfined(object)
        if _slowPath(object.fault != nil) { fulfill(object, slot: slot) }
    }

    /// Checks that `object` is used where its context runs, and is not invalidated.
    @inline(__always)
    func checkConfined(_ object: ManagedObject) {
        switch kind {
        case .main:
            Self.checkMainActor("\(object) belongs to a MainContext and is used off the main actor: read it on the main actor, or bring it into an update with `try update.use(object)`.")
            if object.state == .invalidated {
                preconditionFailure("\(object) was used after its MainContext was reset: fetch it again (world.fetch(_:id:)) after reset().")
            }
        case .update:
            guard Execution.isRunning(self) else {
                preconditionFailure("\(object) belongs to an update context and is used outside its update: use it only inside that update's block or its `update.perform { }` continuations, or pass its objectID and fetch it where you are.")
            }
            if object.state == .invalidated {
                preconditionFailure("\(object) was used after its update was rolled back or finished: fetch it again by its objectID.")
            }
        }
    }

    /// Traps with `message` unless the caller runs on the main actor. The main thread is the
    /// fast path; on Linux an async `main` lets a worker thread drain the main queue, which is
    /// still the main actor, and the queue's specific value recognizes it.
    ///
    /// Not `MainActor.preconditionIsolated(message)`: on Linux it traps without printing the
    /// message, and the message is the point (MisuseTests checks it).
    @inline(__always)
    static func checkMainActor(_ message: @autoclosure () -> String) {
        if Execution.isMainThread || Execution.isOnMainQueue { return }
        preconditionFailure(message())
    }

    /// Checks that the caller runs where this context does (for context-level calls).
    package func checkExecution(_ operation: @autoclosure () -> String) {
        switch kind {
        case .main:
            Self.checkMainActor("\(operation()) on a MainContext must run on the main actor.")
        case .update:
            precondition(Execution.isRunning(self), "\(operation()) was called outside its update: use the `update` handed to your block only inside that block or its `update.perform { }` continuations.")
        }
    }

    /// Checks that `object` may be changed, and starts tracking its changes. Returns `false`
    /// for an object found deleted (`refuseChange`): the caller then leaves it as it is.
    func willChange(_ object: ManagedObject) -> Bool {
        checkRead(object)
        guard kind == .update else {
            preconditionFailure("\(object) belongs to a MainContext, whose objects are read-only: change it in an update — world.beginUpdate { update in let object = try update.use(object); …; try update.commit() }.")
        }
        guard object.state != .deleted else {
            guard foundDeleted(object) else {
                preconditionFailure("\(object) is deleted in this update: a deleted object cannot be changed or related (its last values stay readable).")
            }
            refuseChange(of: object)
            return false
        }
        markChanged(object)
        return true
    }

    /// Whether `object` is deleted because this context found its row gone (a fault that
    /// fired after another context deleted it) or took another context's deletion, not
    /// because this update deleted it. Nothing the app wrote could have known:
    /// `isDeleted` does not fire a fault, and the read that fires it is the property access
    /// itself.
    func foundDeleted(_ object: ManagedObject) -> Bool {
        guard let kept = mergedDeletions[object.objectID], kept.object === object else { return false }
        return !kept.deletedHere
    }

    /// A change of an object found deleted (`foundDeleted`): not kept, and the update's
    /// commits throw `MergeConflictError` (key `<deleted>`) until it is rolled back, as a
    /// commit changing a row another context deleted would.
    func refuseChange(of object: ManagedObject) {
        accessorFailed(MergeConflictError.deleted(object.objectID, explanation: """
            the update changed or related an object whose row another commit deleted, which no merge policy brings back; \
            roll back and fetch again
            """))
    }

    /// Starts tracking `object`'s changes (no checks: internal upkeep of inverses and deletes).
    func markChanged(_ object: ManagedObject) {
        if object.fault != nil { fulfill(object, slot: nil) }
        if pendingUnique != nil { pendingUnique!.touch(object) }
        if object.state == .clean {
            object.beforeImage = object.values
            object.state = .updated
            changed[object.objectID] = object
        }
    }

    /// Whether `property` can point at `other`'s kind of object: a sibling sub-entity shares
    /// the destination's root table, not its type.
    package func canRelate(_ other: ManagedObject, through property: Property) -> Bool {
        property.destination?.includes(other.entity) ?? false
    }

    /// Checks that `object` may be related to `other` through `property`; returns `false` when
    /// `other` was found deleted (`refuseChange`): the caller then changes nothing.
    func checkRelatable(_ object: ManagedObject, _ other: ManagedObject, _ property: Property) -> Bool {
        guard other.context === self else {
            preconditionFailure("Cannot relate \(object) to \(other) through '\(property.name)': they belong to different contexts. Bring \(other.entity.name) into this update first: `let other = try update.use(other)`.")
        }
        guard other.state != .deleted || foundDeleted(other) else {
            preconditionFailure("Cannot relate \(object) to \(other) through '\(property.name)': \(other) is deleted in this update.")
        }
        guard canRelate(other, through: property) else {
            preconditionFailure("Cannot relate \(object) to \(other) through '\(property.name)': it holds \(property.destination?.name ?? "?") objects.")
        }
        return !refusedAsFoundDeleted(other)
    }

    /// Whether `object` is found deleted — maybe only now, by a fault its key's read fired —
    /// in which case the change that involves it is refused (`refuseChange`) and not made.
    func refusedAsFoundDeleted(_ object: ManagedObject) -> Bool {
        guard object.state == .deleted, foundDeleted(object) else { return false }
        refuseChange(of: object)
        return true
    }

    // MARK: - Registry

    package func registered(_ id: ObjectID) -> ManagedObject? {
        registry.object(id)
    }

    /// Forgets a registered object (deleted below this context).
    func unregister(_ id: ObjectID) {
        registry[id] = nil
    }

    /// Registers `object` (held weakly; the registry drops the objects that went away when it
    /// grows).
    func register(_ object: ManagedObject) {
        registry.register(object, as: object.objectID)
    }

    /// The context's object for a row it read: the registered one (refreshed when it has no
    /// changes of its own), or a new one.
    ///
    /// The row is consumed: its values move into the object. (Copying them out of a borrowed
    /// row retained them, and the row's end released them, for every row of a fetch.)
    package func materialize(_ id: ObjectID, _ row: consuming ObjectRow) -> ManagedObject {
        var values = ContiguousArray<Value>()
        swap(&values, &row.values)
        return materialize(id, row.entity, values)
    }

    /// `materialize` for the row a store's connection is on (`RowReader.selectInPlace`): its
    /// values go from the connection into the object's slots, without an `ObjectRow` between.
    /// (Handed to a fetch's closure, a row was copied, its entity and values retained, and
    /// released after: four atomic operations a row, 7 % of a fetch of 100,000 objects.)
    func materialize(_ id: ObjectID, _ entity: Unmanaged<ResolvedEntity>, reading row: any QueryRow) -> ManagedObject {
        entity._withUnsafeGuaranteedRef { entity in
            var values = ContiguousArray<Value>.nulls(entity.properties.count)
            row.read(entity.rowLayout, into: &values)
            return materialize(id, entity, values)
        }
    }

    private func materialize(_ id: ObjectID, _ entity: ResolvedEntity, _ values: consuming ContiguousArray<Value>) -> ManagedObject {
        if let existing = registered(id) {
            if existing.state == .clean {
                // Its to-many relationships are refreshed too, when next used: loaded ones
                // follow only the commits the context applies (an update context's own, a main
                // context's merged ones), and the row may show another's. So may the lists of
                // the owners its to-one references leave and join.
                noteMovedReferences(entity, from: existing.values, to: values)
                existing.values = values
                existing.fault = nil
                if !existing.toManyCache.isEmpty { existing.toManyCache.removeAll() }
            }
            return existing
        }
        if !mergedDeletions.isEmpty, let revived = revivedDeletion(id) {
            revived.values = values
            revived.fault = nil
            return revived
        }
        let object = entity.type.init(_ObjectSeed(id: id, entity: entity, context: self, values: values))
        register(object)
        return object
    }

    /// Values read now for an object the context holds can move it from one owner's loaded
    /// to-many list to another's — another context's commit changed its to-one reference —
    /// leaving both lists wrong, and a cascade following the old one would delete an object
    /// of someone else. When a to-one reference differs from the one the object held, or it
    /// held none yet (a fault), the context moves to a new generation: every loaded to-many
    /// list is read again when next used (`toManyIDs`).
    func noteMovedReferences(_ entity: ResolvedEntity, from old: ContiguousArray<Value>, to new: ContiguousArray<Value>) {
        for slot in entity.toOneSlots where slot >= old.count || slot >= new.count || !old[slot].isIdentical(to: new[slot]) {
            generation += 1
            return
        }
    }

    /// A new object of `entity`, with its permanent ID and default values.
    package func create(_ entity: ResolvedEntity, id: ObjectID? = nil) throws -> ManagedObject {
        let id = try id ?? ObjectID(rootEntity: entity.rootDescription, primaryKey: store.reserveKey(for: entity.rootDescription))
        let object = entity.type.init(_ObjectSeed(id: id, entity: entity, context: self, values: entity.defaults))
        object.state = .inserted
        // The changed objects are held: past half the table, sweeping it would free too little.
        registry.register(object, as: id, alive: changed.count)
        changed[id] = object
        if pendingUnique != nil { pendingUnique!.touch(object) }
        return object
    }

    /// The object with `id` in this context, loading it if needed; `nil` if it does not exist
    /// or is deleted.
    package func object(for id: ObjectID) throws -> ManagedObject? {
        if let object = registered(id) {
            return object.state == .deleted ? nil : object
        }
        // Else one statement by primary key, as the reading context sees the row (its changes,
        // a pinned view, the writer's pending commits), without `objects(for:)`'s lists.
        let row = try prefetchedRow(id) ?? read(shape: .byKeys) { session in
            var reader = RowReader(session: session, context: self)
            return try reader.row(id)
        }
        guard let row else { return nil }
        let object = materialize(id, row)
        return object.state == .deleted ? nil : object
    }

    /// The objects for `ids`, in order, skipping those that do not exist; one read for all.
    func objects(for ids: [ObjectID]) throws -> [ManagedObject] {
        var found = [ManagedObject?](repeating: nil, count: ids.count)
        /// The positions in `ids` of the objects to read.
        var unread: [Int] = []
        for (position, id) in ids.enumerated() {
            if let object = registered(id) {
                found[position] = object
            } else if let row = prefetchedRow(id) {
                found[position] = materialize(id, row)
            } else {
                unread.append(position)
            }
        }
        if !unread.isEmpty {
            // Rows of one family, in one IN list, are one statement (`RowReader.rows(for:)`).
            let root = ids[unread[0]].rootEntity
            let oneFamily = unread.allSatisfy { ids[$0].rootEntity === root }
            let shape: ReadShape = !oneFamily || unread.count > InLists.maximumWidth ? .statements
                : unread.count <= ReadShape.mostKeys ? .byKeys : .oneStatement
            try read(shape: shape) { session in
                var reader = RowReader(session: session, context: self)
                if oneFamily, let entity = graph.entity(for: root), reader.seesStoredRows(of: root) {
                    // Nothing pending can change these rows: they come straight from SQL, in
                    // key order, and each becomes its object as it is read, matched to its
                    // positions through the keys' order (a batch of a cursor loaded a thousand
                    // rows through four dictionaries of a thousand IDs each before).
                    let order = unread.sorted { ids[$0].primaryKey < ids[$1].primaryKey }
                    var next = 0
                    try reader.eachStoredRow(of: entity, ascendingKeys: order.map { ids[$0].primaryKey }) { id, row in
                        while next < order.count && ids[order[next]].primaryKey < id.primaryKey { next += 1 }
                        while next < order.count && ids[order[next]].primaryKey == id.primaryKey {
                            found[order[next]] = materialize(id, row)
                            next += 1
                        }
                    }
                } else {
                    let rows = try reader.rows(for: unread.map { ids[$0] })
                    for position in unread {
                        if let row = rows[ids[position]] { found[position] = materialize(ids[position], row) }
                    }
                }
            }
        }
        return found.compactMap { object in object.flatMap { $0.state == .deleted ? nil : $0 } }
    }

    // MARK: - Fetching

    /// The rows matching `query`, in order, windowed by `offset` and `limit`, merging this
    /// context's pending changes and the writer's pending commits with the store.
    package func fetchRows(_ query: CompiledQuery, offset: Int = 0, limit: Int? = nil) throws -> [(id: ObjectID, row: ObjectRow)] {
        try read { session in
            var reader = RowReader(session: session, context: self)
            return try selectRows(query, offset: offset, limit: limit, columns: nil, reader: &reader).rows
        }
    }

    /// The rows matching `query`, as `fetchRows`, reading only `columns` of the table (by index;
    /// `[]` for IDs only) when SQL alone decides the answer. `complete` tells whether the rows
    /// hold every value anyway (pending changes make the rows come whole).
    func selectRows(_ query: CompiledQuery, offset: Int, limit: Int?, columns: [Int]?,
                    reader: inout RowReader) throws -> (rows: [(id: ObjectID, row: ObjectRow)], complete: Bool) {
        var rows: [(id: ObjectID, row: ObjectRow)] = []
        let complete = try selectRows(query, offset: offset, limit: limit, columns: columns, reader: &reader,
                                      expecting: { rows.reserveCapacity($0) }) { id, row in rows.append((id, row)) }
        return (rows, complete)
    }

    /// `selectRows`, handing the rows to `sink` in order instead of collecting them. When SQL
    /// alone decides the answer they go to `sink` as they are read, so that a fetch can make
    /// each row's object while the row is still in the processor's cache; `expecting` learns
    /// their number first when the store knows it. Returns whether the rows were complete.
    @discardableResult
    func selectRows(_ query: CompiledQuery, offset: Int, limit: Int?, columns: [Int]?, keyOrderInMemory: Bool = false, reader: inout RowReader,
                    expecting: (Int) -> Void, _ sink: (ObjectID, consuming ObjectRow) throws -> Void) throws -> Bool {
        try reader.select(query, offset: offset, limit: limit, columns: columns, keyOrderInMemory: keyOrderInMemory, expecting: expecting, sink)
    }

    /// Makes room in the registry for `count` objects about to be registered: at most one
    /// rebuild, where registering them one by one grew the registry again at every doubling.
    func reserveRegistrations(_ count: Int) {
        guard count > 64, registry.capacity < registry.count + count else { return }
        // Geometric, as growing would be: reserving exactly what one fetch needs would
        // rebuild on every fetch of a loop.
        registry.reserveCapacity(max(registry.count + count, registry.capacity * 2))
    }

    /// How many objects match `query`; a `count(*)` when nothing is pending.
    func fetchCount(_ query: CompiledQuery) throws -> Int {
        // Any pending change may matter (through a key path, a quantifier, a count): only a
        // context and store with nothing pending can trust count(*) alone.
        if changed.isEmpty && links.isEmpty && !query.filtersInMemory, let count = try read(shape: .oneStatement, { session -> Int? in
            guard session.overlay.isEmpty, session.pinned?.isEmpty ?? true else { return nil }
            let sql = query.fromWhere()
            return Int(try session.connection.scalar("SELECT count(*) \(sql.text)", sql.arguments).int64Value ?? 0)
        }) {
            return count
        }
        return try fetchRows(query).count
    }
}
