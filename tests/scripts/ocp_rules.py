"""The OCP Test and Validation output specification's rules (opencomputeproject/ocp-diag-core,
json_spec/output, version 2.0) as checks of our own: no package here ships the JSON schema
(the `ocptv` wheel on PyPI has the Python models only), and the specification's files are not
copied into this repository. Required fields, the fields each object allows, the enums, one
schemaVersion first, one testRunStart and one testRunEnd (last), sequence numbers strictly
increasing, every step started once before its artifacts and ended once after them, and every
hardwareInfoId / softwareInfoId referenced declared in the DUT info."""
import json
import re

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
SOFTWARE_TYPES = {"UNSPECIFIED", "FIRMWARE", "SYSTEM", "APPLICATION"}
SUBCOMPONENT_TYPES = {"UNSPECIFIED", "ASIC", "ASIC-SUBSYSTEM", "BUS", "FUNCTION", "CONNECTOR"}
DIAGNOSIS_TYPES = {"PASS", "FAIL", "UNKNOWN"}
STEP_STATUSES = {"COMPLETE", "ERROR", "SKIP"}
RUN_RESULTS = {"PASS", "FAIL", "NOT_APPLICABLE"}
LOG_SEVERITIES = {"INFO", "DEBUG", "WARNING", "ERROR", "FATAL"}
STEP_ARTIFACTS = {"testStepStart", "testStepEnd", "measurement", "measurementSeriesStart", "measurementSeriesEnd",
                  "measurementSeriesElement", "diagnosis", "error", "file", "log", "extension"}
RUN_ARTIFACTS = {"testRunStart", "testRunEnd", "log", "error"}


class Violation(Exception):
    pass


def require(condition, where, what):
    if not condition:
        raise Violation(f"{where}: {what}")


def obj(value, where, required, allowed):
    require(isinstance(value, dict), where, "not an object")
    missing = [k for k in required if k not in value]
    require(not missing, where, f"missing {missing}")
    extra = sorted(set(value) - set(required) - set(allowed))
    require(not extra, where, f"fields the schema does not allow: {extra}")


def string(value, where):
    require(isinstance(value, str), where, f"{value!r} is not a string")


def enum(value, allowed, where):
    require(value in allowed, where, f"{value!r} not one of {sorted(allowed)}")


def check_subcomponent(s, where):
    obj(s, where, ["name"], ["type", "location", "version", "revision"])
    string(s["name"], where + ".name")
    if "type" in s:
        enum(s["type"], SUBCOMPONENT_TYPES, where + ".type")


def check_dut(d, where, hardware_ids, software_ids):
    obj(d, where, ["dutInfoId"], ["name", "platformInfos", "softwareInfos", "hardwareInfos", "metadata"])
    string(d["dutInfoId"], where + ".dutInfoId")
    for i, p in enumerate(d.get("platformInfos", [])):
        obj(p, f"{where}.platformInfos[{i}]", ["info"], [])
    for i, s in enumerate(d.get("softwareInfos", [])):
        at = f"{where}.softwareInfos[{i}]"
        obj(s, at, ["softwareInfoId", "name"], ["version", "revision", "softwareType", "computerSystem"])
        if "softwareType" in s:
            enum(s["softwareType"], SOFTWARE_TYPES, at + ".softwareType")
        require(s["softwareInfoId"] not in software_ids, at, "softwareInfoId declared twice")
        software_ids.add(s["softwareInfoId"])
    for i, h in enumerate(d.get("hardwareInfos", [])):
        at = f"{where}.hardwareInfos[{i}]"
        obj(h, at, ["hardwareInfoId", "name"],
            ["version", "revision", "location", "serialNumber", "partNumber", "manufacturer",
             "manufacturerPartNumber", "odataId", "computerSystem", "manager"])
        require(h["hardwareInfoId"] not in hardware_ids, at, "hardwareInfoId declared twice")
        hardware_ids.add(h["hardwareInfoId"])


def check_log(body, where):
    obj(body, where, ["severity", "message"], ["sourceLocation"])
    enum(body["severity"], LOG_SEVERITIES, where + ".severity")


def check_error(body, where, software_ids):
    obj(body, where, ["symptom"], ["message", "softwareInfoIds", "sourceLocation"])
    for sid in body.get("softwareInfoIds", []):
        require(sid in software_ids, where, f"softwareInfoId {sid!r} not declared in dutInfo")


def check_hardware_ref(body, where, hardware_ids):
    if "hardwareInfoId" in body:
        require(body["hardwareInfoId"] in hardware_ids, where, f"hardwareInfoId {body['hardwareInfoId']!r} not declared")


def check_step_artifact(body, where, state):
    require(isinstance(body, dict), where, "not an object")
    require(isinstance(body.get("testStepId"), str), where, "testStepId missing or not a string")
    kinds = set(body) - {"testStepId"}
    require(len(kinds) == 1 and kinds <= STEP_ARTIFACTS, where, f"needs exactly one step artifact, has {sorted(kinds)}")
    kind = kinds.pop()
    value, step = body[kind], body["testStepId"]
    at = f"{where}.{kind}"
    if kind == "testStepStart":
        obj(value, at, ["name"], [])
        require(step not in state["started"], at, f"step {step!r} started twice")
        state["started"].add(step)
        return
    require(step in state["started"], at, f"step {step!r} not started")
    require(step not in state["ended"], at, f"artifact after step {step!r} ended")
    if kind == "testStepEnd":
        obj(value, at, ["status"], [])
        enum(value["status"], STEP_STATUSES, at + ".status")
        state["ended"].add(step)
    elif kind == "measurement":
        obj(value, at, ["name", "value"], ["unit", "validators", "hardwareInfoId", "subcomponent", "metadata"])
        require(isinstance(value["value"], (int, float, str, bool)), at, "value is not a number, string or boolean")
        check_hardware_ref(value, at, state["hardware"])
        if "subcomponent" in value:
            check_subcomponent(value["subcomponent"], at + ".subcomponent")
    elif kind == "diagnosis":
        obj(value, at, ["verdict", "type"], ["message", "hardwareInfoId", "subcomponent", "sourceLocation"])
        string(value["verdict"], at + ".verdict")
        enum(value["type"], DIAGNOSIS_TYPES, at + ".type")
        check_hardware_ref(value, at, state["hardware"])
        if "subcomponent" in value:
            check_subcomponent(value["subcomponent"], at + ".subcomponent")
    elif kind == "error":
        check_error(value, at, state["software"])
    elif kind == "log":
        check_log(value, at)


def check_lines(lines):
    """Returns the parsed artifacts; raises Violation naming the first rule a line breaks."""
    require(lines, "ocp output", "empty")
    artifacts = []
    state = {"started": set(), "ended": set(), "hardware": set(), "software": set()}
    run_started = run_ended = False
    last_sequence = -1
    for n, line in enumerate(lines, 1):
        where = f"line {n}"
        try:
            a = json.loads(line)
        except json.JSONDecodeError as e:
            raise Violation(f"{where}: not JSON ({e})")
        require(isinstance(a, dict), where, "not an object")
        require(not run_ended, where, "artifact after testRunEnd")
        kinds = set(a) - {"sequenceNumber", "timestamp"}
        require(len(kinds) == 1 and kinds <= {"schemaVersion", "testRunArtifact", "testStepArtifact"}, where,
                f"needs exactly one of schemaVersion, testRunArtifact, testStepArtifact; has {sorted(kinds)}")
        require(isinstance(a.get("sequenceNumber"), int), where, "sequenceNumber missing or not an integer")
        require(a["sequenceNumber"] > last_sequence, where, "sequenceNumber does not increase")
        last_sequence = a["sequenceNumber"]
        require(isinstance(a.get("timestamp"), str) and RFC3339.match(a["timestamp"]), where,
                f"timestamp {a.get('timestamp')!r} is not RFC 3339")
        kind = kinds.pop()
        if kind == "schemaVersion":
            require(n == 1, where, "schemaVersion not first")
            obj(a[kind], where + ".schemaVersion", ["major", "minor"], [])
            require((a[kind]["major"], a[kind]["minor"]) == (2, 0), where, "schemaVersion is not 2.0")
        else:
            require(n > 1, where, "the first line is not schemaVersion")
        if kind == "testRunArtifact":
            body = a[kind]
            inner = set(body) if isinstance(body, dict) else set()
            require(len(inner) == 1 and inner <= RUN_ARTIFACTS, where, f"needs exactly one run artifact, has {sorted(inner)}")
            inner = inner.pop()
            at = f"{where}.{inner}"
            if inner == "testRunStart":
                require(not run_started, at, "second testRunStart")
                obj(body[inner], at, ["name", "version", "commandLine", "parameters", "dutInfo"], ["metadata"])
                for key in ("name", "version", "commandLine"):
                    string(body[inner][key], f"{at}.{key}")
                require(isinstance(body[inner]["parameters"], dict), at, "parameters is not an object")
                check_dut(body[inner]["dutInfo"], at + ".dutInfo", state["hardware"], state["software"])
                run_started = True
            else:
                require(run_started, at, "before testRunStart")
                if inner == "testRunEnd":
                    obj(body[inner], at, ["status", "result"], [])
                    enum(body[inner]["status"], STEP_STATUSES, at + ".status")
                    enum(body[inner]["result"], RUN_RESULTS, at + ".result")
                    unended = sorted(state["started"] - state["ended"])
                    require(not unended, at, f"steps never ended: {unended}")
                    run_ended = True
                elif inner == "log":
                    check_log(body[inner], at)
                else:
                    check_error(body[inner], at, state["software"])
        elif kind == "testStepArtifact":
            require(run_started, where, "step artifact before testRunStart")
            check_step_artifact(a[kind], where + ".testStepArtifact", state)
        artifacts.append(a)
    require(run_ended, "ocp output", "no testRunEnd")
    return artifacts
