import Synchronization

#if DEBUG
import _ContextStackCore

/// Internal consistency checks of a context's object graph, for the test suites (as
/// swift-collections' `_checkInvariants()`): off unless a debug build turns them on, and then
/// run after every commit an update context makes and after every change set a main context
/// applies.
extension ContextCore {
    /// Whether contexts check their invariants (debug builds only; the tests turn it on).
    static let checksInvariants = Atomic<Bool>(false)

    /// Traps naming the first broken invariant:
    /// - every registered object is registered under its own ID, belongs to this context, and
    ///   is neither invalidated nor (unless it has changes) left with a before-image;
    /// - every object with changes is registered, held under its ID, and in a changed state,
    ///   an updated one with its before-image;
    /// - a loaded to-many relationship of the current generation holds exactly the members
    ///   whose to-one inverse, where that member is registered and loaded, points back.
    func checkInvariants() {
        guard Self.checksInvariants.load(ordering: .relaxed) else { return }
        for (id, entry) in registry {
            guard let object = entry.object else { continue }
            precondition(object.objectID == id, "invariant: \(object) is registered under \(id)")
            precondition(object.context === self, "invariant: \(object) is registered in a context it does not belong to")
            precondition(object.state != .invalidated, "invariant: \(object) is registered but invalidated")
            if object.state == .clean {
                precondition(object.beforeImage == nil, "invariant: clean \(object) keeps a before-image")
                precondition(changed[id] == nil, "invariant: clean \(object) is among the changes")
            }
        }
        for (id, object) in changed {
            precondition(object.objectID == id, "invariant: \(object) is a change under \(id)")
            precondition(object.state == .inserted || object.state == .updated || object.state == .deleted,
                         "invariant: \(object) is among the changes in state \(object.state)")
            if object.state == .updated {
                precondition(object.beforeImage != nil, "invariant: updated \(object) has no before-image")
            }
            if object.state != .deleted {
                precondition(registry[id]?.object === object, "invariant: changed \(object) is not registered")
            }
        }
        for entry in registry.values {
            guard let owner = entry.object, owner.fault == nil, owner.state != .deleted else { continue }
            for (slot, cache) in owner.toManyCache where cache.generation == generation {
                let property = owner.entity.properties[slot]
                guard let inverse = property.inverse, !inverse.isToMany else { continue }
                for memberID in cache.ids {
                    guard let member = registered(memberID), member.fault == nil, member.state != .deleted else { continue }
                    precondition(member.values[inverse.slot] == .integer(owner.objectID.primaryKey),
                                 "invariant: \(owner).\(property.name) holds \(member), whose \(inverse.name) points elsewhere")
                }
            }
        }
    }
}
#endif
