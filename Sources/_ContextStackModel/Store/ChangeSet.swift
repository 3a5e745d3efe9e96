import _ContextStackCore

/// The values of one object as a context sees them: its entity and its slots.
package struct ObjectRow: Sendable {
    package let entity: ResolvedEntity
    package var values: ContiguousArray<Value>

    package init(entity: ResolvedEntity, values: ContiguousArray<Value>) {
        self.entity = entity
        self.values = values
    }
}

/// A pair added to or removed from a join table.
package struct LinkKey: Hashable, Sendable {
    package let table: String
    package let source: Int64
    package let target: Int64

    package init(table: String, source: Int64, target: Int64) {
        self.table = table
        self.source = source
        self.target = target
    }
}

extension Property {
    /// The join-table pair that relates `owner` (on this relationship's side) to `member`.
    package func linkKey(_ join: JoinTable, owner: Int64, member: Int64) -> LinkKey {
        isJoinSource ? LinkKey(table: join.name, source: owner, target: member) : LinkKey(table: join.name, source: member, target: owner)
    }

    /// The keys of a join-table pair, this relationship's side first.
    func ends(of key: LinkKey) -> (owner: Int64, member: Int64) {
        isJoinSource ? (key.source, key.target) : (key.target, key.source)
    }

    /// The objects and relationship names of the pair relating `owner` (on this side) to
    /// `member`, with the entity of each where the caller knows it (its object is at hand).
    package func linkEnds(owner: ObjectID, member: ObjectID,
                          ownerEntity: EntityDescription? = nil, memberEntity: EntityDescription? = nil) -> LinkEnds {
        isJoinSource
            ? LinkEnds(source: owner, sourceKey: name, target: member, targetKey: inverse?.name,
                       sourceEntity: ownerEntity, targetEntity: memberEntity)
            : LinkEnds(source: member, sourceKey: inverse?.name, target: owner, targetKey: name,
                       sourceEntity: memberEntity, targetEntity: ownerEntity)
    }
}

/// The two objects of a join-table pair and the relationship on each side (the target side's
/// is `nil` for a to-many without inverse), so a commit can report both as changed.
///
/// An object's `ObjectID` names only its root entity (a hierarchy shares one table and its
/// keys); each side's own entity, when the context knew it, lets the commit and its history
/// name a sub-entity's object by its entity even when a pair is all the commit changed of it.
///
/// Code that points a pair elsewhere, or drops a side's key, changes a copy's fields, so that
/// what it leaves alone (the entities) travels with the pair.
package struct LinkEnds: Sendable {
    package var source: ObjectID
    package var sourceKey: String?
    package var target: ObjectID
    package var targetKey: String?
    package let sourceEntity: EntityDescription?
    package let targetEntity: EntityDescription?

    package init(source: ObjectID, sourceKey: String?, target: ObjectID, targetKey: String?,
                 sourceEntity: EntityDescription? = nil, targetEntity: EntityDescription? = nil) {
        self.source = source
        self.sourceKey = sourceKey
        self.target = target
        self.targetKey = targetKey
        self.sourceEntity = sourceEntity
        self.targetEntity = targetEntity
    }
}

/// What made a commit delete an object it did not delete itself: the `.cascade` rule of
/// `property` of the deleted object `parent` (`ChangeSet.cascaded`).
package struct CascadeOrigin: Sendable {
    package let parent: ObjectID
    package let property: Property

    package init(parent: ObjectID, property: Property) {
        self.parent = parent
        self.property = property
    }
}

/// Everything one commit changes, as it travels from a context down to the store.
package struct ChangeSet: Sendable {
    /// The changed values of one object.
    package struct RowUpdate: Sendable {
        package let id: ObjectID
        package let entity: ResolvedEntity
        /// The changed slots and their new values.
        package var slots: [Int]
        package var values: [Value]
        /// The object's values when its context started changing it, and all of its values
        /// now: what merge policies compare with the store.
        package var snapshot: ContiguousArray<Value> = []
        package var current: ContiguousArray<Value> = []
        /// Set by `apply(_:expecting:)`: a change in the store since `snapshot` is a conflict
        /// (`MergeConflictError`) whatever the commit's merge policy.
        package var expectsStoredRow = false

        /// Whether the update only sets to-one relationships to `nil`.
        var onlyClearsToOnes: Bool {
            zip(slots, values).allSatisfy { slot, value in value == .null && entity.properties[slot].isToOne }
        }

        package init(id: ObjectID, entity: ResolvedEntity, slots: [Int], values: [Value],
                     snapshot: ContiguousArray<Value> = [], current: ContiguousArray<Value> = [],
                     expectsStoredRow: Bool = false) {
            self.id = id
            self.entity = entity
            self.slots = slots
            self.values = values
            self.snapshot = snapshot
            self.current = current
            self.expectsStoredRow = expectsStoredRow
        }
    }

    package var inserts: [(id: ObjectID, row: ObjectRow)] = []
    package var updates: [RowUpdate] = []
    package var deletes: [(id: ObjectID, entity: ResolvedEntity)] = []
    /// Join-table pairs: `true` to add, `false` to remove.
    package var links: [(key: LinkKey, present: Bool)] = []
    /// Which objects and relationships each pair joins.
    package var linkEnds: [LinkKey: LinkEnds] = [:]
    /// Inserted objects that `fetchOrCreate` made under a claimed unique key, with the slots it
    /// set: if the row exists by the time the commit is saved, they merge into it.
    package var upserts: [ObjectID: [Int]] = [:]
    /// Those of `upserts` whose unique values the update changed after `fetchOrCreate` made
    /// them: the values they were claimed under are free again once the commit is queued
    /// (`releaseClaims`). Otherwise a later `fetchOrCreate` of those values would be given the
    /// object's ID and merge into its row, which holds other values.
    package var rekeyed: [ObjectID] = []
    /// Objects the commit deletes only because a `.cascade` rule of an object it deletes
    /// reached them, with every deleted object and relationship that did. Their context read
    /// them related; another commit may have moved them out of the relationship since, and a
    /// delete rule is applied to what is stored when the commit is written, so the writer checks
    /// (`QueuedStore.checkCascades`). Objects the app deleted itself are not here.
    package var cascaded: [ObjectID: [CascadeOrigin]] = [:]
    /// Who made the commit, and where it sits in the history once written.
    package var info = CommitInfo()
    /// Set on what undoes a commit that was announced and then failed to save
    /// (`QueuedStore.undo`): its inserts are rows that commit deleted, restored, which main
    /// contexts bring their deleted objects back for (`ContextCore.apply`).
    package var undoesFailedSave = false

    package init() {}

    package var isEmpty: Bool { inserts.isEmpty && updates.isEmpty && deletes.isEmpty && links.isEmpty }

    /// Appends the rows and pairs of `later`, a change set to apply after this one (two
    /// corrections of one commit, say).
    package mutating func append(_ later: ChangeSet) {
        inserts += later.inserts
        updates += later.updates
        deletes += later.deletes
        links += later.links
        linkEnds.merge(later.linkEnds) { _, later in later }
        if !later.cascaded.isEmpty { cascaded.merge(later.cascaded) { $0 + $1 } }
    }

    /// Whether saving the commit under `policy` compares its updates with what is stored.
    package func checksStore(under policy: MergePolicy) -> Bool {
        !updates.isEmpty && (policy.checksStore || updates.contains(where: \.expectsStoredRow))
    }

    /// Whether the commit sets values that a uniqueness constraint covers (an insert whose
    /// constrained values are all `nil` cannot conflict).
    package var touchesUniqueKeys: Bool {
        // By index, reading only what is needed: iterating copies each element (a retain and a
        // release of its ID's entity, its row's entity and its values), which for an import of
        // 100,000 rows without a constraint was all the work.
        for index in inserts.indices where !inserts[index].row.entity.uniqueConstraints.isEmpty {
            let row = inserts[index].row
            if row.entity.uniqueConstraints.contains(where: { $0.key(in: row.values) != nil }) { return true }
        }
        for index in updates.indices where !updates[index].entity.uniqueSlots.isEmpty {
            let update = updates[index]
            if update.slots.contains(where: update.entity.uniqueSlots.contains) { return true }
        }
        return false
    }
}

extension ChangeSet {
    /// The first object of `objects` that this commit changes, or relates an object to (a
    /// to-one it sets, a join-table pair it adds), without inserting it itself; `nil` when
    /// there is none. Removing a pair, deleting, or clearing an object's to-ones (what a delete
    /// rule does to the objects related to a deleted one) needs no stored row.
    package func firstReference(to objects: Set<ObjectID>) -> ObjectID? {
        guard !objects.isEmpty else { return nil }
        let inserted = Set(inserts.lazy.map(\.id).filter(objects.contains))
        func refers(to id: ObjectID) -> Bool { objects.contains(id) && !inserted.contains(id) }
        for update in updates {
            if refers(to: update.id) && !update.onlyClearsToOnes { return update.id }
            for (slot, value) in zip(update.slots, update.values) {
                if let id = update.entity.properties[slot].destinationID(of: value), refers(to: id) { return id }
            }
        }
        for insert in inserts {
            for property in insert.row.entity.properties where property.isToOne {
                if let id = property.destinationID(of: insert.row.values[property.slot]), refers(to: id) { return id }
            }
        }
        for link in links where link.present {
            guard let ends = linkEnds[link.key] else { continue }
            if refers(to: ends.source) { return ends.source }
            if refers(to: ends.target) { return ends.target }
        }
        return nil
    }
}

/// What a main context that does not merge must still see of rows changed since it pinned its
/// view: each row as it was then.
package enum BeforeImage: Sendable {
    /// The row did not exist.
    case absent
    /// The whole row, for a row deleted since.
    case row(ObjectRow)
    /// The former values of the slots changed since; other slots are as stored.
    case slots(ResolvedEntity, [Int: Value])
}

/// The before-images of one pinned view, kept by the store as commits arrive.
package struct PinnedImages: Sendable {
    package var rows: [ObjectID: BeforeImage] = [:]
    /// Whether each join-table pair changed since existed at pin time.
    package var links: [LinkKey: Bool] = [:]
    /// For imaged slots that commits the view shows had set and not yet written when the
    /// image was taken: the value stored under those commits, with what the view's commits
    /// stored since (`recordStored`). The image's slot goes back to it once no commit the view
    /// shows that may still be written set the slot (`QueuedStore.settleImages`). Slots not
    /// here were imaged from the store — the image is their stored value — or by the writer
    /// inside its transaction, which records none (`settleImages` then goes back to what a
    /// failed commit's context started from). Emptied once every commit the view shows is
    /// written or failed.
    var storedSlots: [ObjectID: [Int: Value]] = [:]
    /// The same for join-table pairs.
    var storedLinks: [LinkKey: Bool] = [:]
    /// The last commit queued when the view was pinned: the view shows it and those before it
    /// that were not written yet, so it must hear what undoes or corrects them (`correct`).
    package let seenUpTo: UInt64
    /// Hands the view's context what undoes a commit the view showed that then failed to be
    /// saved, or what the writer saved otherwise than the view showed.
    package let correct: (@Sendable (ChangeSet) -> Void)?

    package init(seenUpTo: UInt64, correct: (@Sendable (ChangeSet) -> Void)?) {
        self.seenUpTo = seenUpTo
        self.correct = correct
    }

    var isEmpty: Bool { rows.isEmpty && links.isEmpty }

    /// Sets the imaged values of `slots` of the row `id` (those it has an image of) to `values`.
    mutating func setImage(of id: ObjectID, slots: [Int], to values: [Value]) {
        guard !slots.isEmpty, let image = rows[id] else { return }
        switch image {
        case .slots(let entity, var imaged):
            for (slot, value) in zip(slots, values) where imaged[slot] != nil { imaged[slot] = value }
            rows[id] = .slots(entity, imaged)
        case .row(var row):
            for (slot, value) in zip(slots, values) where slot < row.values.count { row.values[slot] = value }
            rows[id] = .row(row)
        case .absent:
            break
        }
    }

    /// The slots of the row `id` the view has an image of.
    func imagedSlots(of id: ObjectID) -> [Int] {
        switch rows[id] {
        case .slots(_, let imaged)?: Array(imaged.keys)
        case .row(let row)?: Array(row.values.indices)
        case .absent?, nil: []
        }
    }

    /// Records what `changes`, a commit the view shows, stored in the rows and pairs imaged:
    /// the values the images go back to should a later commit the view shows fail.
    mutating func recordStored(_ changes: ChangeSet) {
        for insert in changes.inserts where rows[insert.id] != nil {
            for slot in imagedSlots(of: insert.id) where slot < insert.row.values.count {
                storedSlots[insert.id, default: [:]][slot] = insert.row.values[slot]
            }
        }
        for update in changes.updates where rows[update.id] != nil {
            let imaged = Set(imagedSlots(of: update.id))
            for (slot, value) in zip(update.slots, update.values) where imaged.contains(slot) {
                storedSlots[update.id, default: [:]][slot] = value
            }
        }
        for link in changes.links where links[link.key] != nil { storedLinks[link.key] = link.present }
    }

    /// Sets the imaged `slots` of the row `id` to their stored values (`storedSlots`).
    mutating func showStored(_ id: ObjectID, slots: some Sequence<Int>) {
        guard let stored = storedSlots[id] else { return }
        let known = slots.filter { stored[$0] != nil }
        setImage(of: id, slots: known, to: known.map { stored[$0]! })
    }

    /// Sets the image of the pair `key` to whether it is stored (`storedLinks`).
    mutating func showStored(_ key: LinkKey) {
        if links[key] != nil, let stored = storedLinks[key] { links[key] = stored }
    }

    /// Sets the image of the row `id` to `image` (`nil`: none), with no stored values under it.
    mutating func setImage(of id: ObjectID, to image: BeforeImage?) {
        rows[id] = image
        storedSlots[id] = nil
    }

    /// Whether the view showed the commit `sequence`, queued when it was pinned, and hears
    /// how the writer saved it otherwise (`PinnedCorrections`).
    func hearsCorrections(of sequence: UInt64) -> Bool { correct != nil && seenUpTo >= sequence }
}

/// Commits handed to the writer but not yet in SQLite, by object, so that every read — on
/// any context — sees them as if they were stored.
package struct Overlay: Sendable {
    package enum Pending: Sendable {
        case inserted(ObjectRow)
        /// Changed slots only, with their values (the change set's own arrays, not copied):
        /// unchanged ones come from the store.
        case updated(ResolvedEntity, slots: [Int], values: [Value])
        case deleted(ResolvedEntity)
    }

    package struct Entry: Sendable {
        package var pending: Pending
        /// The sequence number of the last commit that touched the entry.
        var sequence: UInt64
        /// For an entry that several commits made: the commit that set each slot — of an
        /// update, each of its `slots`, in their order; of an insert, each slot of the row.
        /// `nil` while one commit made it (every slot is `sequence`'s): no array for the common
        /// case.
        var slotSequences: [UInt64]? = nil
        /// For an insert that later commits changed: the inserting commit's sequence.
        var insertedAt: UInt64? = nil

        /// Takes a later commit's changes to the same row (none to a deleted one).
        mutating func merge(_ update: ChangeSet.RowUpdate, sequence: UInt64) {
            switch pending {
            case .inserted(var row):
                var setBy = slotSequences ?? Array(repeating: self.sequence, count: row.values.count)
                if insertedAt == nil { insertedAt = self.sequence }
                for (slot, value) in zip(update.slots, update.values) {
                    row.values[slot] = value
                    setBy[slot] = sequence
                }
                pending = .inserted(row)
                slotSequences = setBy
            case .updated(let entity, var slots, var values):
                var setBy = slotSequences ?? Array(repeating: self.sequence, count: slots.count)
                for (slot, value) in zip(update.slots, update.values) {
                    if let index = slots.firstIndex(of: slot) {
                        values[index] = value
                        setBy[index] = sequence
                    } else {
                        slots.append(slot)
                        values.append(value)
                        setBy.append(sequence)
                    }
                }
                pending = .updated(entity, slots: slots, values: values)
                slotSequences = setBy
            case .deleted:
                return
            }
            self.sequence = sequence
        }

        /// The entry without what commits up to `written` set: those are stored now, or
        /// failed and must not show (their undo reads what is stored through the overlay).
        /// `nil` when nothing later is left.
        ///
        /// An insert that is written or failed leaves what later commits set pending as an
        /// update: of the stored row, or of no row (reads then find none) when it failed.
        func keeping(after written: UInt64) -> Entry? {
            guard sequence > written else { return nil }
            guard let setBy = slotSequences else { return self }
            let kept = setBy.indices.filter { setBy[$0] > written }
            let pending: Pending
            switch self.pending {
            case .updated(let entity, let slots, let values):
                pending = .updated(entity, slots: kept.map { slots[$0] }, values: kept.map { values[$0] })
            case .inserted(let row) where (insertedAt ?? sequence) <= written:
                pending = .updated(row.entity, slots: kept, values: kept.map { row.values[$0] })
            default:
                return self
            }
            var entry = Entry(pending: pending, sequence: sequence)
            if let first = kept.first, kept.contains(where: { setBy[$0] != setBy[first] }) { entry.slotSequences = kept.map { setBy[$0] } }
            return entry
        }
    }

    /// Pending rows by the root entity of their table.
    private(set) var rows: [ObjectIdentifier: [ObjectID: Entry]] = [:]
    /// The sequence number of the last commit that touched each table of `rows`: once it is
    /// written, the table's rows all go at once.
    private var lastSequences: [ObjectIdentifier: UInt64] = [:]
    private(set) var links: [LinkKey: (present: Bool, sequence: UInt64)] = [:]

    package init() {}

    package var isEmpty: Bool { rows.isEmpty && links.isEmpty }

    /// Pending rows of the table whose root entity is `root`.
    package func rows(of root: EntityDescription) -> [ObjectID: Entry] { rows[ObjectIdentifier(root)] ?? [:] }

    func entry(for id: ObjectID) -> Entry? { rows[ObjectIdentifier(id.rootEntity)]?[id] }

    /// Pending pairs of a join table.
    func links(of table: String) -> [LinkKey: Bool] {
        var result: [LinkKey: Bool] = [:]
        for (key, value) in links where key.table == table { result[key] = value.present }
        return result
    }

    package mutating func apply(_ changes: ChangeSet, sequence: UInt64) {
        // One allocation for a large commit's rows (they mostly share one table), instead of
        // growing and rehashing at every doubling.
        if changes.inserts.count > 64, let first = changes.inserts.first {
            reserve(changes.inserts.count, for: ObjectIdentifier(first.id.rootEntity))
        }
        if changes.updates.count > 64, let first = changes.updates.first {
            reserve(changes.updates.count, for: ObjectIdentifier(first.id.rootEntity))
        }
        // The tables the commit touches (rows of one table mostly come together).
        var touched: ObjectIdentifier?
        func touch(_ root: ObjectIdentifier) {
            guard root != touched else { return }
            lastSequences[root] = sequence
            touched = root
        }
        for insert in changes.inserts {
            let root = ObjectIdentifier(insert.id.rootEntity)
            rows[root, default: [:]][insert.id] = Entry(pending: .inserted(insert.row), sequence: sequence)
            touch(root)
        }
        // By index: `for update in` copies each update (six references) only to read it.
        for index in changes.updates.indices {
            let root = ObjectIdentifier(changes.updates[index].id.rootEntity)
            Self.merge(changes.updates[index], sequence: sequence, into: &rows[root, default: [:]])
            touch(root)
        }
        for delete in changes.deletes {
            let root = ObjectIdentifier(delete.id.rootEntity)
            rows[root, default: [:]][delete.id] = Entry(pending: .deleted(delete.entity), sequence: sequence)
            touch(root)
        }
        for link in changes.links {
            links[link.key] = (link.present, sequence)
        }
    }

    private mutating func reserve(_ count: Int, for root: ObjectIdentifier) {
        rows[root, default: [:]].reserveCapacity((rows[root]?.count ?? 0) + count)
    }

    /// An update of a row: its changed slots, or merged into what is pending for the row.
    private static func merge(_ update: ChangeSet.RowUpdate, sequence: UInt64, into entries: inout [ObjectID: Entry]) {
        if let index = entries.index(forKey: update.id) {
            entries.values[index].merge(update, sequence: sequence)
        } else {
            entries[update.id] = Entry(pending: .updated(update.entity, slots: update.slots, values: update.values), sequence: sequence)
        }
    }

    /// Forgets what commits up to `sequence` changed: they are in the store now.
    package mutating func removeWritten(upTo sequence: UInt64) {
        for (root, last) in lastSequences {
            // Every row of the table was written when its last commit was: no need to look at each.
            let remaining = last <= sequence ? [:] : (rows[root] ?? [:]).compactMapValues { $0.keeping(after: sequence) }
            rows[root] = remaining.isEmpty ? nil : remaining
            if remaining.isEmpty { lastSequences[root] = nil }
        }
        links = links.filter { $0.value.sequence > sequence }
    }
}
