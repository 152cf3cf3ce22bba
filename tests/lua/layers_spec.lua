-- The layering of the C and CUDA code (issue 11): no file of a lower layer includes one of a higher layer
-- (scripts/check_layers.lua has the rule). The checker itself is shown to catch each kind of violation.
local layers = dofile("scripts/check_layers.lua")

describe("layers", function()
    it("hold across core/ and kernels/", function()
        local problems, count = layers.check_tree(".")
        assert.is_true(count > 50, "the tree was read")
        assert.are.same({}, problems)
    end)

    it("the checker refuses upward, sideways and relative includes", function()
        assert.are.equal(1, #layers.check_file("core/base/tensor.c", '#include "core/engine/model.h"\n'))
        assert.are.equal(1, #layers.check_file("core/io/config.c", '#include "core/text/tokenizer_internal.h"\n'))
        assert.are.equal(1, #layers.check_file("kernels/cpu/linear.c", '#include "kernels/cuda/cuda_common.cuh"\n'))
        assert.are.equal(1, #layers.check_file("kernels/backend.h", '#include "core/io/config.h"\n'))
        assert.are.equal(1, #layers.check_file("core/engine/step.c", '#include "../io/config.h"\n'))
        assert.are.equal(0, #layers.check_file("core/engine/step.c",
                                               '#include "core/io/config.h"\n#include "kernels/backend.h"\n'))
        assert.are.equal(0, #layers.check_file("kernels/cuda/moe.cu", '#include <cub/cub.cuh>\n'))
    end)
end)
