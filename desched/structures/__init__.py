"""Data structures the policies rank with: per-tenant queues, heap helpers, a kinetic
tournament tree. They know nothing of policies; policies only rank over them."""
