/// Removing and inserting several elements of a large array in one pass each.
///
/// `remove(at:)` and `insert(_:at:)` move every element after the index, so a commit that
/// moves k objects in results of n moved about k · n references, twice over (the objects and
/// the values they were placed by). These move each element after the first index once.
extension Array {
    /// Removes the elements at `indices`, which increase strictly.
    mutating func remove(atSortedIndices indices: [Int]) {
        guard let first = indices.first else { return }
        let count = self.count
        let removed = indices.count
        // Checked before anything moves: a wrong index would move memory it must not.
        precondition(first >= 0 && indices.last! < count && zip(indices, indices.dropFirst()).allSatisfy { $0 < $1 },
                     "remove(atSortedIndices:): indices must increase strictly and lie in the array")
        withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            let taken = UnsafeMutablePointer<Element>.allocate(capacity: removed)
            defer { taken.deallocate() }
            var write = first
            for (j, index) in indices.enumerated() {
                (taken + j).moveInitialize(from: base + index, count: 1)
                let next = j + 1 < removed ? indices[j + 1] : count
                let run = next - index - 1
                (base + write).moveInitialize(from: base + index + 1, count: run)
                write += run
            }
            // The removed ones at the end, for `removeLast` to release.
            (base + write).moveInitialize(from: taken, count: removed)
        }
        removeLast(removed)
    }

    /// Inserts each element of `items` at its `position` among the elements already here
    /// (positions that do not decrease); several at one position go in the order given.
    mutating func insert(_ items: [(position: Int, element: Element)]) {
        guard !items.isEmpty else { return }
        let count = self.count
        let added = items.count
        // Checked before anything moves, as above.
        precondition(items.first!.position >= 0 && items.last!.position <= count
                        && zip(items, items.dropFirst()).allSatisfy { $0.position <= $1.position },
                     "insert(_:): positions must not decrease and must lie in the array")
        // A closure, not `\.element`: a key path in a generic context is made at run time.
        append(contentsOf: items.lazy.map { $0.element })
        withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            let taken = UnsafeMutablePointer<Element>.allocate(capacity: added)
            defer { taken.deallocate() }
            taken.moveInitialize(from: base + count, count: added)
            // From the back: each run of old elements moves right by the number of new ones
            // still to place before it, then the new one goes in front of it.
            var read = count
            var write = count + added
            for j in stride(from: added - 1, through: 0, by: -1) {
                let position = items[j].position
                let run = read - position
                write -= run
                (base + write).moveInitialize(from: base + position, count: run)
                read = position
                write -= 1
                (base + write).moveInitialize(from: taken + j, count: 1)
            }
        }
    }
}
