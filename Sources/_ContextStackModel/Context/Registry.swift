/// A context's identity map: the object of each ID the context holds, held weakly (the context
/// holds the changed ones strongly besides, in `changed`).
///
/// An open-addressing hash table with linear probing, its size a power of two, at most three
/// quarters full. A `Dictionary<ObjectID, WeakObject>` did the same job, but a fetch of
/// 100,000 objects into an empty context spent a third of its time in the dictionary growing:
/// at each doubling it hashes every ID again with `Hasher` (SipHash). Here an ID's slot is its
/// key and entity folded into one word and multiplied by 2⁶⁴/φ, keeping the top bits
/// (Fibonacci hashing): a multiplication, and IDs with consecutive keys, which are the common
/// case, spread evenly over the table. Growing moves each weak reference to its new slot
/// without copying it.
///
/// The IDs and the objects are in two arrays side by side, so that probing reads IDs only: a
/// weak reference is touched only in the slot that holds the ID.
struct Registry: Sequence {
    /// Each slot's ID, `nil` when the slot is free.
    private var ids: [ObjectID?] = []
    /// Each slot's object; a free slot's holds nothing.
    private var objects: [ContextCore.WeakObject] = []
    /// How many slots hold an ID.
    private(set) var count = 0
    /// 64 minus the number of bits of a slot index.
    private var shift: UInt64 = 64

    /// How many IDs fit before the table grows.
    var capacity: Int { ids.count / 4 * 3 }

    /// The object registered under `id`, if the slot was not freed (it may have gone since).
    /// Setting `nil` frees the slot.
    subscript(id: ObjectID) -> ContextCore.WeakObject? {
        get {
            guard count > 0, case (let slot, true) = find(id) else { return nil }
            return objects[slot]
        }
        set {
            if let newValue { insert(newValue.object, for: id) } else { remove(id) }
        }
    }

    /// Registers `object` under `id`, in place of whatever was.
    mutating func register(_ object: ManagedObject, as id: ObjectID) {
        insert(object, for: id)
    }

    /// Calls `body` with every registered object still alive, reading each weak reference in
    /// place.
    func forEachObject(_ body: (ManagedObject) -> Void) {
        for slot in ids.indices where ids[slot] != nil {
            if let object = objects[slot].object { body(object) }
        }
    }

    /// The object registered under `id`, if it is still alive; reads the weak reference in
    /// place (the subscript copies it).
    func object(_ id: ObjectID) -> ManagedObject? {
        guard count > 0, case (let slot, true) = find(id) else { return nil }
        return objects[slot].object
    }

    /// Makes room for `minimumCapacity` IDs in all, so that registering them grows nothing.
    mutating func reserveCapacity(_ minimumCapacity: Int) {
        guard minimumCapacity > capacity else { return }
        var size = Swift.max(8, ids.count)
        while size / 4 * 3 < minimumCapacity { size *= 2 }
        resize(to: size)
    }

    /// Frees every slot and the table's memory.
    mutating func removeAll() {
        self = Registry()
    }

    /// Frees the slots of the objects `shouldRemove` picks, and shrinks the table to what the
    /// rest needs.
    mutating func removeAll(where shouldRemove: (ContextCore.WeakObject) -> Bool) {
        var survivors = 0
        for slot in ids.indices where ids[slot] != nil && !shouldRemove(objects[slot]) { survivors += 1 }
        var kept = Registry()
        kept.reserveCapacity(survivors)
        for slot in ids.indices {
            guard let id = ids[slot], !shouldRemove(objects[slot]) else { continue }
            kept.move(id, from: &objects[slot])
        }
        self = kept
    }

    /// Every registered ID with its weak reference, in no particular order.
    func makeIterator() -> Iterator {
        Iterator(registry: self)
    }

    struct Iterator: IteratorProtocol {
        let registry: Registry
        var slot = 0

        mutating func next() -> (key: ObjectID, value: ContextCore.WeakObject)? {
            while slot < registry.ids.count {
                defer { slot += 1 }
                if let id = registry.ids[slot] { return (id, registry.objects[slot]) }
            }
            return nil
        }
    }

    /// The weak references, in no particular order.
    var values: LazyMapSequence<Registry, ContextCore.WeakObject> { lazy.map(\.value) }

    // MARK: - The table

    /// The slot where probing for `id` starts.
    private func home(_ id: ObjectID) -> Int {
        let word = UInt64(bitPattern: id.primaryKey) &+ UInt64(UInt(bitPattern: ObjectIdentifier(id.rootEntity))) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: (word &* 0x9E37_79B9_7F4A_7C15) >> shift)
    }

    /// The slot holding `id` and `true`, or the free slot where it would go and `false`. The
    /// table must have a free slot.
    private func find(_ id: ObjectID) -> (slot: Int, found: Bool) {
        let mask = ids.count - 1
        var slot = home(id)
        while let held = ids[slot] {
            if held == id { return (slot, true) }
            slot = (slot + 1) & mask
        }
        return (slot, false)
    }

    /// Sets the weak reference in `id`'s slot (assigning a strong reference to it makes no copy
    /// of another weak one).
    private mutating func insert(_ object: ManagedObject?, for id: ObjectID) {
        if count > 0, case (let slot, true) = find(id) {
            objects[slot].object = object
            return
        }
        if count + 1 > capacity { resize(to: Swift.max(8, ids.count * 2)) }
        let slot = find(id).slot
        ids[slot] = id
        objects[slot].object = object
        count += 1
    }

    /// Frees `id`'s slot, then moves later IDs of the same run back into the gap, so that
    /// probing never stops early at a freed slot (backward-shift deletion; no tombstones).
    private mutating func remove(_ id: ObjectID) {
        guard count > 0, case (var gap, true) = find(id) else { return }
        let mask = ids.count - 1
        ids[gap] = nil
        objects[gap] = ContextCore.WeakObject()
        count -= 1
        var slot = (gap + 1) & mask
        while let held = ids[slot] {
            // `held` may fill the gap when its home is not within (gap, slot], cyclically.
            let home = home(held)
            let staysPut = gap <= slot ? (gap < home && home <= slot) : (gap < home || home <= slot)
            if !staysPut {
                ids[gap] = held
                ids[slot] = nil
                objects.swapAt(gap, slot)
                gap = slot
            }
            slot = (slot + 1) & mask
        }
    }

    /// Rebuilds the table with `size` slots (a power of two), moving every reference over.
    private mutating func resize(to size: Int) {
        var grown = Registry()
        grown.ids = Array(repeating: nil, count: size)
        grown.objects = Array(repeating: ContextCore.WeakObject(), count: size)
        grown.shift = UInt64(64 - size.trailingZeroBitCount)
        for slot in ids.indices {
            guard let id = ids[slot] else { continue }
            grown.move(id, from: &objects[slot])
        }
        self = grown
    }

    /// Puts `id` in its slot, taking the reference out of `object` (which is left empty): a
    /// swap moves a weak reference, where assigning it would copy it.
    private mutating func move(_ id: ObjectID, from object: inout ContextCore.WeakObject) {
        if ids.isEmpty { reserveCapacity(1) }
        let slot = find(id).slot
        ids[slot] = id
        swap(&objects[slot], &object)
        count += 1
    }
}
