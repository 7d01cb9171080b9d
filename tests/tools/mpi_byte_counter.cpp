// Counts what a process hands to MPI, through MPI's profiling interface (each MPI_X here
// calls PMPI_X): calls and payload bytes per collective (and again per communicator size,
// "all_gather@2"), written at MPI_Finalize to $TESSERA_MPI_COUNT_DIR/rank<R>.json. Loaded with
// LD_PRELOAD by tests/tools/distributed.sh, so communication volume is checked against the MPI
// calls themselves, not against Tessera's own comms logger.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace {

struct Count {
  long long calls = 0;
  long long bytes = 0;  // payload: the data one rank contributes (all-gather: receives)
};

// Never destroyed: MPI_Finalize may run during the process's static destruction.
std::mutex& mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<std::string, Count>& counts() {
  static auto* c = new std::map<std::string, Count>;
  return *c;
}

void add(const std::string& op, long long count, MPI_Datatype type) {
  int size = 0;
  PMPI_Type_size(type, &size);
  std::lock_guard<std::mutex> lock(mu());
  Count& c = counts()[op];
  ++c.calls;
  c.bytes += count * size;
}

// A collective's count under its name and again per communicator size ("all_gather@2"), so a
// test can tell a group's traffic from the whole job's.
void add_collective(const char* op, long long count, MPI_Datatype type, int comm_size) {
  add(op, count, type);
  add(std::string(op) + "@" + std::to_string(comm_size), count, type);
}

}  // namespace

extern "C" {

int MPI_Allreduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
  add("all_reduce", count, t);
  return PMPI_Allreduce(s, r, count, t, op, comm);
}

int MPI_Reduce_scatter_block(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op,
                             MPI_Comm comm) {
  int n = 1;
  PMPI_Comm_size(comm, &n);
  add_collective("reduce_scatter", static_cast<long long>(count) * n, t, n);  // each rank's input
  return PMPI_Reduce_scatter_block(s, r, count, t, op, comm);
}

int MPI_Allgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                  MPI_Comm comm) {
  int n = 1;
  PMPI_Comm_size(comm, &n);
  add_collective("all_gather", static_cast<long long>(rc) * n, rt, n);  // the gathered output
  return PMPI_Allgather(s, sc, st, r, rc, rt, comm);
}

int MPI_Alltoall(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                 MPI_Comm comm) {
  int n = 1;
  PMPI_Comm_size(comm, &n);
  add_collective("all_to_all", static_cast<long long>(sc) * n, st, n);  // each rank's input
  return PMPI_Alltoall(s, sc, st, r, rc, rt, comm);
}

int MPI_Bcast(void* b, int count, MPI_Datatype t, int root, MPI_Comm comm) {
  add("broadcast", count, t);
  return PMPI_Bcast(b, count, t, root, comm);
}

int MPI_Isend(const void* b, int count, MPI_Datatype t, int dst, int tag, MPI_Comm comm,
              MPI_Request* req) {
  add("send", count, t);
  return PMPI_Isend(b, count, t, dst, tag, comm, req);
}

int MPI_Finalize() {
  const char* dir = std::getenv("TESSERA_MPI_COUNT_DIR");
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (dir) {
    const std::string path = std::string(dir) + "/rank" + std::to_string(rank) + ".json";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fprintf(f, "{");
      const char* sep = "";
      for (const auto& [op, c] : counts()) {
        std::fprintf(f, "%s\"%s\": {\"calls\": %lld, \"bytes\": %lld}", sep, op.c_str(), c.calls,
                     c.bytes);
        sep = ", ";
      }
      std::fprintf(f, "}\n");
      std::fclose(f);
    }
  }
  return PMPI_Finalize();
}

}  // extern "C"
