"""``ray._private.runtime_env.packaging``: the constants of Ray's runtime-env packaging.

Ray uploads a job's ``working_dir`` / ``py_modules`` into its GCS from here and workers
download them; NeMo-RL's ``init_ray()`` imports this module and ``importlib.reload``s it to clear
Ray's driver-side upload cache before it starts a new cluster. The adapter packages
``ray.init``'s ``working_dir`` / ``py_modules`` itself (the embedded runtime copies them into its
session directory), so there is no cache to clear: the module imports and reloads, its constants
are Ray's values, and Ray's upload/download functions are documented gaps (the compat matrix,
``ray._private.runtime_env.packaging.toml``).
"""
from ray_adapter import gaps as _gaps

COMPOUND_ARCHIVE_EXTENSIONS = ('.tar.gz', '.tar.bz2', '.tar.xz')
FILE_SIZE_WARNING = 10485760
GCS_STORAGE_MAX_SIZE = 536870912
GRPC_CPP_MAX_MESSAGE_SIZE = 536870912
JAR_EXTENSION = '.jar'
MAC_OS_ZIP_HIDDEN_DIR_NAME = '__MACOSX'
PACKAGE_SIZE_WARNING = 268435456
PACKAGE_SIZE_WARNING_MIB_ENV_VAR = 'RAY_PACKAGE_SIZE_WARNING_MIB'
RAY_PKG_PREFIX = '_ray_pkg_'
RAY_RUNTIME_ENV_FAIL_DOWNLOAD_FOR_TESTING_ENV_VAR = 'RAY_RUNTIME_ENV_FAIL_DOWNLOAD_FOR_TESTING'
RAY_RUNTIME_ENV_FAIL_UPLOAD_FOR_TESTING_ENV_VAR = 'RAY_RUNTIME_ENV_FAIL_UPLOAD_FOR_TESTING'
RAY_RUNTIME_ENV_URI_PIN_EXPIRATION_S_DEFAULT = 600
RAY_RUNTIME_ENV_URI_PIN_EXPIRATION_S_ENV_VAR = 'RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S'
TAR_EXTENSIONS = ('.tar.gz', '.tgz', '.tar.bz2', '.tar.xz')
TAR_GZ_EXTENSION = '.tar.gz'
TAR_XZ_EXTENSION = '.tar.xz'
TGZ_EXTENSION = '.tgz'
WHEEL_EXTENSION = '.whl'
ZIP_EXTENSION = '.zip'

__getattr__ = _gaps.module_getattr("ray._private.runtime_env.packaging")
