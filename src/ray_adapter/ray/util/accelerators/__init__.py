"""``ray.util.accelerators``: accelerator type names for ``accelerator_type=`` (mirrors Ray 2.60).

``@ray.remote(accelerator_type=NVIDIA_A100)`` asks for 0.001 of the ``accelerator_type:A100``
resource, as Ray does: it runs only on a node that declares that resource (Ray sets it on nodes
where it detects such a device; here, declare it: ``ray.init(resources={"accelerator_type:A100":
1})`` or ``Cluster.add_node(resources=...)``). ``NVIDIA_TESLA_A100`` is Ray's deprecated alias of
``NVIDIA_A100`` (it warns).
"""
import warnings

from ray_adapter import gaps

NVIDIA_TESLA_V100 = "V100"
NVIDIA_TESLA_P100 = "P100"
NVIDIA_TESLA_T4 = "T4"
NVIDIA_TESLA_P4 = "P4"
NVIDIA_TESLA_K80 = "K80"
NVIDIA_TESLA_A10G = "A10G"
NVIDIA_L4 = "L4"
NVIDIA_A100 = "A100"
NVIDIA_H100 = "H100"
INTEL_MAX_1550 = "Intel-GPU-Max-1550"
INTEL_MAX_1100 = "Intel-GPU-Max-1100"
INTEL_GAUDI = "Intel-GAUDI"
AMD_INSTINCT_MI100 = "AMD-Instinct-MI100"
AMD_INSTINCT_MI210 = "AMD-Instinct-MI210"
AMD_INSTINCT_MI250 = "AMD-Instinct-MI250X-MI250"
AMD_INSTINCT_MI250x = "AMD-Instinct-MI250X"
AMD_INSTINCT_MI300x = "AMD-Instinct-MI300X-OAM"
AMD_RADEON_R9_200_HD_7900 = "AMD-Radeon-R9-200-HD-7900"
AMD_RADEON_HD_7900 = "AMD-Radeon-HD-7900"
AWS_NEURON_CORE = "aws-neuron-core"
GOOGLE_TPU_V2 = "TPU-V2"
GOOGLE_TPU_V3 = "TPU-V3"
GOOGLE_TPU_V4 = "TPU-V4"
GOOGLE_TPU_V5P = "TPU-V5P"
GOOGLE_TPU_V5LITEPOD = "TPU-V5LITEPOD"
GOOGLE_TPU_V6E = "TPU-V6E"
GOOGLE_TPU_V7X = "TPU-V7X"
METAX_C500 = "MXC500"
METAX_C550 = "MXC550"
MOBILINT_ARIES = "MOBILINT_ARIES"
MOBILINT_REGULUS = "MOBILINT_REGULUS"
APPLE_M1 = "M1"
APPLE_M1_PRO = "M1-Pro"
APPLE_M1_MAX = "M1-Max"
APPLE_M1_ULTRA = "M1-Ultra"
APPLE_M2 = "M2"
APPLE_M2_PRO = "M2-Pro"
APPLE_M2_MAX = "M2-Max"
APPLE_M2_ULTRA = "M2-Ultra"
APPLE_M3 = "M3"
APPLE_M3_PRO = "M3-Pro"
APPLE_M3_MAX = "M3-Max"
APPLE_SILICON = "Apple-Silicon"

_gap_getattr = gaps.module_getattr("ray.util.accelerators")


def __getattr__(name):
    if name == "NVIDIA_TESLA_A100":
        warnings.warn("NVIDIA_TESLA_A100 is deprecated, use NVIDIA_A100 instead.",
                      DeprecationWarning, stacklevel=2)
        return NVIDIA_A100
    return _gap_getattr(name)
