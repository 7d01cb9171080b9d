#include "tessera/parallel/shape_only_group.h"

#include "tessera/error.h"

namespace tessera::parallel {

ShapeOnlyGroup::ShapeOnlyGroup(int size) : size_(size) {
  TS_CHECK(size >= 1, "ShapeOnlyGroup: size ", size, " < 1");
}

void ShapeOnlyGroup::refuse() {
  fail("a shape-only process group (estimate-memory's) was asked to communicate");
}

}  // namespace tessera::parallel
