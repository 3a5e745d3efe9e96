/// A context's identity map: the object of each ID the context holds, held weakly (the context
/// holds the changed ones strongly besides, in `changed`).
///
/// An open-addressing hash table with linear probing, its size a power of two, at most three
/// quarters full. A `Dictionary<ObjectID, WeakObject>` did the same job, but a fetch of
/// 100,000 objects into an empty context spent a third of its time in the dictionary growing:
/// at each doubling it hashes every ID again with `Hasher` (SipHash). Here an ID's block of
/// eight slots is `ObjectID.word` (key and entity in one word) without its low three bits,
/// multiplied by 2⁶⁴/φ, keeping the top bits (Fibonacci hashing), and the low three bits place
/// it in its block (see `home`): a multiplication, and IDs with consecutive keys, which are
/// the common case, fill blocks side by side in memory. Growing moves each weak reference to
/// its new slot without copying it.
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
    /// Whether growing drops the IDs whose objects are gone. A fetch turns it off while it
    /// registers the objects it returns: it holds every one of them, and reading each weak
    /// reference at every doubling (a cache miss apiece) cost a 100,000-object fetch a seventh
    /// of its time. The next growth after it looks again.
    var sweepsWhenGrowing = true
    /// `count` when the gone objects' IDs were last dropped (by a sweep, or a rebuild that
    /// looked), or when the table was new.
    private var countAfterSweep = 0
    /// How many times the table was rebuilt (new arrays), and how many times it was swept in
    /// place (for tests of when it grows).
    private(set) var rebuilds = 0
    private(set) var sweeps = 0

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
    ///
    /// `alive`: how many registered objects the caller knows to be alive (held strongly
    /// elsewhere, as an update holds the objects it changed). When they fill more than half of
    /// a full table, sweeping out the gone ones cannot make enough room, so it grows at once:
    /// an update that creates 100,000 objects rebuilt the table twice at every doubling, the
    /// first time for nothing.
    mutating func register(_ object: ManagedObject, as id: ObjectID, alive: Int = 0) {
        insert(object, for: id, alive: alive)
    }

    /// Calls `body` with every registered object still alive, reading each weak reference in
    /// place.
    func forEachObject(_ body: (ManagedObject) -> Void) {
        for slot in ids.indices where ids[slot] != nil {
            if let object = object(at: slot) { body(object) }
        }
    }

    /// The object registered under `id`, if it is still alive; reads the weak reference in
    /// place (the subscript copies it).
    ///
    /// `mutating`, though it changes nothing: the registry is a stored property of its
    /// context, a class, and a non-mutating call on it copied the whole struct first (a
    /// retain and a release of both arrays, on every look-up: 7 % of a small fetch), where a
    /// mutating one works on it in place.
    mutating func object(_ id: ObjectID) -> ManagedObject? {
        guard count > 0, case (let slot, true) = find(id) else { return nil }
        return object(at: slot)
    }

    /// Makes room for `minimumCapacity` IDs in all, so that registering them grows nothing.
    mutating func reserveCapacity(_ minimumCapacity: Int) {
        guard minimumCapacity > capacity else { return }
        var size = Swift.max(8, ids.count)
        while size / 4 * 3 < minimumCapacity { size *= 2 }
        resize(to: size, droppingGone: sweepsWhenGrowing)
    }

    /// Drops the IDs of objects that are gone when a quarter of the table's room was taken
    /// since it last did, so that the cost (reading every weak reference) is spread over the
    /// registrations that made the need. Called before a fetch turns `sweepsWhenGrowing` off:
    /// without it, a loop of fetches whose objects are let go between them grew the table for
    /// the dead IDs alone, fetch after fetch (a filter loop of 1,000 × 100 objects ended with
    /// 100,000 of them, probed with a cache miss apiece, each keeping its weak reference's
    /// side table allocated).
    ///
    /// `alive`: how many registered objects the caller knows to be alive (an update's changed
    /// objects). When the rest could not free the quarter, the sweep is skipped: an import by
    /// `fetchOrCreate`, whose every read came here with all of its objects held, rebuilt the
    /// table for nothing once a quarter of it had been registered.
    mutating func dropGoneIfDue(alive: Int = 0) {
        guard count >= 8, count - countAfterSweep >= capacity / 4, count - alive >= capacity / 4 else { return }
        sweep()
    }

    /// Frees every slot and the table's memory.
    mutating func removeAll() {
        self = Registry()
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

    /// The object in `slot`'s weak reference, read where it is: through the array's
    /// subscript, the optimizer copies the reference first (and destroys the copy), which cost
    /// a fetch more than a third of its time. So does an immutable pointer's `pointee`
    /// (`swift_weakCopyInit` and a destroy around the load, in Swift 6.3 at `-O`): the read
    /// goes through a mutable pointer, whose `pointee` is the slot itself. Nothing is written.
    private func object(at slot: Int) -> ManagedObject? {
        objects.withUnsafeBufferPointer { Self.object(in: $0.baseAddress!, at: slot) }
    }

    /// The object of the weak reference at `base + slot`, loaded in place (see `object(at:)`).
    @inline(__always)
    private static func object(in base: UnsafePointer<ContextCore.WeakObject>, at slot: Int) -> ManagedObject? {
        (UnsafeMutablePointer(mutating: base) + slot).pointee.object
    }

    /// The slot where probing for `id` starts.
    private func home(_ id: ObjectID) -> Int {
        Self.home(id, shift: shift)
    }

    /// Runs of eight consecutive keys of an entity share a block of eight slots (the low three
    /// bits of the ID's word place it in its block), and blocks are spread over the table by
    /// Fibonacci hashing of the rest. A fetch registers its rows in key order far more often
    /// than not: eight IDs then land in two cache lines of `ids` and one of `objects`, where
    /// a hash of each ID sent each to a line of its own (a cache miss apiece, a quarter of a
    /// 100,000-object fetch over PostgreSQL in `Registry.find` and `insert`).
    private static func home(_ id: ObjectID, shift: UInt64) -> Int {
        let word = id.word
        let block = ((word >> 3) &* 0x9E37_79B9_7F4A_7C15) >> (shift &+ 3)
        return Int(truncatingIfNeeded: block << 3 | word & 7)
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
    private mutating func insert(_ object: ManagedObject?, for id: ObjectID, alive: Int = 0) {
        if count > 0, case (let slot, true) = find(id) {
            objects[slot].object = object
            return
        }
        if count + 1 > capacity { makeRoom(alive: alive) }
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

    /// Makes room for one more ID when the table is full: frees the slots of the IDs whose
    /// objects are gone (`sweep`), and doubles the table only if those were fewer than a third
    /// of them. So the table grows only for objects that are alive, and a long-lived context
    /// that keeps registering and releasing objects (a cursor) stays at about twice what it
    /// holds alive, with one sweep per quarter of the table registered. (It used to double
    /// first and shrink back: two rebuilds, one of twice the size, each time the table filled,
    /// a seventh of walking a cursor.) With `alive` objects known alive filling more than
    /// half the table, the sweep is skipped: it could not free enough.
    private mutating func makeRoom(alive: Int) {
        let size = ids.count
        var swept = false
        if sweepsWhenGrowing && size >= 8 && alive <= size / 2 {
            sweep()
            if count <= size / 2 { return }
            swept = true
        }
        // Just swept, or as many objects known alive as registered (an update creating
        // objects, which it holds): growing need not read every weak reference, each a load
        // and a release through the object's side table (a sixth of an import's `create`).
        resize(to: Swift.max(8, size * 2), droppingGone: sweepsWhenGrowing && !swept && alive < count)
    }

    /// Frees the slots of the IDs whose objects are gone, in place. Rebuilding the table at its
    /// size did the same with two new arrays: a context that looks up one object at a time and
    /// lets it go (a lookup loop) allocated them every six look-ups, a tenth of its time.
    ///
    /// In two passes: the first frees every gone object's slot; the second puts each ID left
    /// back in the first free slot from its home, going round the table from a free slot, so
    /// that the IDs before it in its run are already in place. (Removing the gone IDs one at a
    /// time, each with a probe for it and a backward shift of its run, was a tenth of a loop
    /// of small fetches whose objects are let go between them.)
    mutating func sweep() {
        defer {
            countAfterSweep = count
            sweeps += 1
        }
        let size = ids.count
        guard count > 0 else { return }
        let (mask, shift) = (size - 1, shift)
        var removed = 0
        ids.withUnsafeMutableBufferPointer { ids in
            objects.withUnsafeMutableBufferPointer { objects in
                let objects = objects.baseAddress!
                // A slot free before any is freed (the table is at most three quarters full): no
                // ID's probe crosses it, so the runs after it can be laid again from it alone.
                // (Starting from a slot freed below, an ID put back past another of its run
                // that is put back later was lost.)
                var start = 0
                while ids[start] != nil { start += 1 }
                for slot in 0..<size where ids[slot] != nil && objects[slot].object == nil {
                    ids[slot] = nil
                    objects[slot] = ContextCore.WeakObject()
                    removed += 1
                }
                guard removed > 0 else { return }
                for step in 1...size {
                    let slot = (start + step) & mask
                    guard let id = ids[slot] else { continue }
                    var target = Self.home(id, shift: shift)
                    while target != slot, ids[target] != nil { target = (target + 1) & mask }
                    guard target != slot else { continue }
                    ids[target] = id
                    ids[slot] = nil
                    swap(&objects[target], &objects[slot])
                }
            }
        }
        count -= removed
    }

    /// Rebuilds the table with `size` slots (a power of two, room for every live ID), moving
    /// the references over; with `droppingGone`, only those of the objects still alive.
    ///
    /// Through buffer pointers: each reference is read and moved where it lies. Through the
    /// arrays' subscripts the optimizer copied references (and, once, a whole array), which
    /// cost a fetch of 100,000 objects a third of its time.
    ///
    /// The IDs are placed first, noting where each new slot's reference comes from; then the
    /// new array of references is made in one pass, each moved in once. (Made empty first and
    /// filled by swapping, each moved reference cost three moves and an empty one, through the
    /// weak reference's value witnesses: two fifths of growing the table.)
    private mutating func resize(to size: Int, droppingGone: Bool) {
        var grown = Registry()
        grown.ids = Self.repeated(nil, count: size)
        grown.shift = UInt64(64 - size.trailingZeroBitCount)
        let (mask, shift) = (size - 1, grown.shift)
        var moved = 0
        // Each new slot's old slot, or -1 for a free one. (A table of 2³¹ slots would hold 64 GiB.)
        var sources = Self.repeated(Int32(-1), count: size)
        ids.withUnsafeBufferPointer { ids in
            objects.withUnsafeBufferPointer { objects in
                grown.ids.withUnsafeMutableBufferPointer { grownIDs in
                    sources.withUnsafeMutableBufferPointer { sources in
                        for slot in ids.indices {
                            guard let id = ids[slot] else { continue }
                            if droppingGone && Self.object(in: objects.baseAddress!, at: slot) == nil { continue }
                            var target = Self.home(id, shift: shift)
                            while grownIDs[target] != nil { target = (target + 1) & mask }
                            grownIDs[target] = id
                            sources[target] = Int32(truncatingIfNeeded: slot)
                            moved += 1
                        }
                    }
                }
            }
        }
        if moved == 0 {
            // Nothing to move (a new context's first registration).
            grown.objects = Self.repeated(ContextCore.WeakObject(), count: size)
        } else {
            objects.withUnsafeMutableBufferPointer { objects in
                let old = objects.baseAddress!
                sources.withUnsafeBufferPointer { sources in
                    grown.objects = Array(unsafeUninitializedCapacity: size) { buffer, initialized in
                        let new = buffer.baseAddress!
                        for slot in 0..<size {
                            let source = Int(sources[slot])
                            if source < 0 {
                                (new + slot).initialize(to: ContextCore.WeakObject())
                            } else {
                                // The old slot is left empty, for the old array to destroy.
                                (new + slot).moveInitialize(from: old + source, count: 1)
                                (old + source).initialize(to: ContextCore.WeakObject())
                            }
                        }
                        initialized = size
                    }
                }
            }
        }
        grown.count = moved
        grown.sweepsWhenGrowing = sweepsWhenGrowing
        grown.countAfterSweep = droppingGone ? moved : countAfterSweep
        grown.rebuilds = rebuilds + 1
        grown.sweeps = sweeps
        self = grown
    }

    /// `count` copies of `value`, made with `reserveCapacity` and `append`, which are
    /// specialized here: `Array(repeating:count:)` is not, and looked the array's storage type
    /// up in the runtime's metadata cache (600 instructions an array, three arrays for a new
    /// context's first registration, once per commit of a read-modify-write loop).
    private static func repeated<T>(_ value: T, count: Int) -> [T] {
        var array: [T] = []
        array.reserveCapacity(count)
        for _ in 0..<count { array.append(value) }
        return array
    }
}
